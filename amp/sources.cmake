# Sources of mixprec::amp: loss-scale rules, the LossScaleOptimizer and dtype policies.
target_sources(mixprec PRIVATE
  amp/loss_scale.cpp
  amp/unscale.cpp
  amp/policy.cpp
  amp/loss_scale_optimizer.cpp)
# The unscale loop compares floats against FLT_MAX; without trapping math GCC turns that into vector
# blends (it never reads the floating-point exception flags).
set_property(SOURCE amp/unscale.cpp APPEND PROPERTY COMPILE_OPTIONS -fno-trapping-math)
