# Sources of mixprec::models: layers, Sequential, the built-in models, datasets, the fit loop and its
# callbacks, and checkpoint files.
target_sources(mixprec PRIVATE
  models/layer.cpp
  models/sequential.cpp
  models/dataset.cpp
  models/initializers.cpp
  models/layers_core.cpp
  models/layers_conv.cpp
  models/layers_norm.cpp
  models/attention.cpp
  models/transformer.cpp
  models/zoo.cpp
  models/vit.cpp
  models/fashion_mnist.cpp
  models/checkpoint.cpp
  models/crc32c.cpp
  models/fit.cpp
  models/callbacks.cpp)
