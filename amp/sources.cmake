# Sources of mixprec::amp: loss-scale rules, the LossScaleOptimizer and dtype policies.
target_sources(mixprec PRIVATE
  amp/loss_scale.cpp)
