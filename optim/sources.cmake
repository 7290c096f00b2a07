# Sources of mixprec::optim: the Optimizer interface, SGD, Adam / AdamW and learning-rate schedules.
target_sources(mixprec PRIVATE
  optim/optimizer.cpp
  optim/optimizer_state.cpp
  optim/communicator.cpp
  optim/schedule.cpp
  optim/sgd.cpp
  optim/adam.cpp
  optim/near_underflow.cpp)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_sources(mixprec PRIVATE optim/arch/adam_avx512.cpp optim/arch/sgd_avx512.cpp optim/arch/adam_avx2.cpp
    optim/arch/sgd_avx2.cpp)
  set_source_files_properties(optim/arch/adam_avx512.cpp optim/arch/sgd_avx512.cpp PROPERTIES COMPILE_OPTIONS
    "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq")
  set_source_files_properties(optim/arch/adam_avx2.cpp optim/arch/sgd_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2")
endif()
