# Sources of mixprec::models, one folder per concern, each including only from the folders below it:
# layers/ and data/ (on autodiff, optim, amp), io/ (checkpoint files), then training/ (Model, Sequential, the
# built-in models, the fit loop and its callbacks, checkpoints of a model).
target_sources(mixprec PRIVATE
  models/layers/layer.cpp
  models/layers/initializers.cpp
  models/layers/layers_core.cpp
  models/layers/products.cpp
  models/layers/layers_conv.cpp
  models/layers/pooling.cpp
  models/layers/layers_norm.cpp
  models/layers/embedding.cpp
  models/layers/attention.cpp
  models/layers/transformer.cpp
  models/data/dataset.cpp
  models/data/fashion_mnist.cpp
  models/data/array_dataset.cpp
  models/io/checkpoint.cpp
  models/io/files.cpp
  models/io/measured_choices.cpp
  models/io/npy.cpp
  models/io/npz.cpp
  models/io/safetensors.cpp
  models/io/weights.cpp
  models/io/crc32c.cpp
  models/training/model.cpp
  models/training/sequential.cpp
  models/training/zoo.cpp
  models/training/vit.cpp
  models/training/losses.cpp
  models/training/metrics.cpp
  models/training/fit.cpp
  models/training/digests.cpp
  models/training/compile.cpp
  models/training/callbacks.cpp
  models/training/telemetry_json.cpp
  models/training/monitor.cpp
  models/training/csv_logger.cpp
  models/training/learning_rate_scheduler.cpp
  models/training/model_checkpoint.cpp
  models/training/array_files.cpp)
