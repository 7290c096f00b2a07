#pragma once
/// mixprec: mixed-precision neural network training in C++. Include this one header.

#include <mixprec/version.hpp>

#include <mixprec/autodiff/gradcheck.hpp>
#include <mixprec/autodiff/ops_conv.hpp>
#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_loss.hpp>
#include <mixprec/autodiff/ops_matmul.hpp>
#include <mixprec/autodiff/ops_nn.hpp>
#include <mixprec/autodiff/ops_pool.hpp>
#include <mixprec/autodiff/ops_reduce.hpp>
#include <mixprec/autodiff/ops_shape.hpp>
#include <mixprec/autodiff/ops_softmax.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/core_share.hpp>
#include <mixprec/autodiff/tensor/dtype.hpp>
#include <mixprec/autodiff/tensor/errors.hpp>
#include <mixprec/autodiff/tensor/format.hpp>
#include <mixprec/autodiff/tensor/isa.hpp>
#include <mixprec/autodiff/tensor/kernels_elementwise.hpp>
#include <mixprec/autodiff/tensor/kernels_matmul.hpp>
#include <mixprec/autodiff/tensor/rng.hpp>
#include <mixprec/autodiff/tensor/shape.hpp>
#include <mixprec/autodiff/tensor/tensor.hpp>
#include <mixprec/autodiff/tensor/tensor_xt.hpp>
#include <mixprec/autodiff/variable.hpp>

#include <mixprec/optim/adam.hpp>
#include <mixprec/optim/optimizer.hpp>
#include <mixprec/optim/schedule.hpp>
#include <mixprec/optim/sgd.hpp>

#include <mixprec/amp/loss_scale.hpp>
#include <mixprec/amp/loss_scale_optimizer.hpp>
#include <mixprec/amp/policy.hpp>
#include <mixprec/amp/unscale.hpp>

#include <mixprec/models/data/array_dataset.hpp>
#include <mixprec/models/data/dataset.hpp>
#include <mixprec/models/data/fashion_mnist.hpp>
#include <mixprec/models/io/checkpoint.hpp>
#include <mixprec/models/io/npy.hpp>
#include <mixprec/models/io/npz.hpp>
#include <mixprec/models/io/safetensors.hpp>
#include <mixprec/models/io/training_state.hpp>
#include <mixprec/models/io/weights.hpp>
#include <mixprec/models/layers/attention.hpp>
#include <mixprec/models/layers/embedding.hpp>
#include <mixprec/models/layers/initializers.hpp>
#include <mixprec/models/layers/layer.hpp>
#include <mixprec/models/layers/layers_conv.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/layers/layers_norm.hpp>
#include <mixprec/models/layers/pooling.hpp>
#include <mixprec/models/layers/transformer.hpp>
#include <mixprec/models/training/array_files.hpp>
#include <mixprec/models/training/callback.hpp>
#include <mixprec/models/training/callbacks.hpp>
#include <mixprec/models/training/fit.hpp>
#include <mixprec/models/training/model_checkpoint.hpp>
#include <mixprec/models/training/sequential.hpp>
#include <mixprec/models/training/share_cores.hpp>
#include <mixprec/models/training/zoo.hpp>
