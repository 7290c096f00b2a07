# Sources of mixprec::optim: the Optimizer interface, SGD, Adam / AdamW and learning-rate schedules.
target_sources(mixprec PRIVATE
  optim/optimizer.cpp
  optim/schedule.cpp
  optim/sgd.cpp
  optim/adam.cpp)
# The Adam loop vectorizes only if sqrt need not set errno; contraction into FMA stays off so that every
# vector width (autodiff/tensor/detail/isa_kernels.hpp) rounds as the scalar code does and gives the same bits.
set_property(SOURCE optim/adam.cpp optim/sgd.cpp APPEND PROPERTY COMPILE_OPTIONS -fno-math-errno -ffp-contract=off)
