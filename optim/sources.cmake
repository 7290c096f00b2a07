# Sources of mixprec::optim: the Optimizer interface, SGD, Adam / AdamW and learning-rate schedules.
target_sources(mixprec PRIVATE
  optim/optimizer.cpp
  optim/optimizer_state.cpp
  optim/communicator.cpp
  optim/schedule.cpp
  optim/sgd.cpp
  optim/adam.cpp)
