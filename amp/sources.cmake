# Sources of mixprec::amp: loss-scale rules, the LossScaleOptimizer and dtype policies.
target_sources(mixprec PRIVATE
  amp/loss_scale.cpp
  amp/loss_scale_rules.cpp
  amp/unscale.cpp
  amp/gradient_exchange.cpp
  amp/policy.cpp
  amp/telemetry.cpp
  amp/layer_scales.cpp
  amp/fp8_scaling.cpp
  amp/fp8_scaling_values.cpp
  amp/loss_scale_optimizer.cpp
  amp/loss_scale_values.cpp)
