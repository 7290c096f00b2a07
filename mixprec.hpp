#pragma once
/// mixprec: mixed-precision neural network training in C++. Include this one header.

#include <mixprec/version.hpp>

#include "autodiff/convert.hpp"
#include "autodiff/dtype.hpp"
#include "autodiff/errors.hpp"
#include "autodiff/format.hpp"
#include "autodiff/gradcheck.hpp"
#include "autodiff/kernels_elementwise.hpp"
#include "autodiff/kernels_matmul.hpp"
#include "autodiff/rng.hpp"
#include "autodiff/ops_elementwise.hpp"
#include "autodiff/ops_conv.hpp"
#include "autodiff/ops_loss.hpp"
#include "autodiff/ops_matmul.hpp"
#include "autodiff/ops_nn.hpp"
#include "autodiff/ops_pool.hpp"
#include "autodiff/ops_reduce.hpp"
#include "autodiff/ops_shape.hpp"
#include "autodiff/ops_softmax.hpp"
#include "autodiff/shape.hpp"
#include "autodiff/tensor.hpp"
#include "autodiff/tape.hpp"
#include "autodiff/tensor_xt.hpp"
#include "autodiff/variable.hpp"

#include "optim/adam.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "optim/sgd.hpp"

#include "amp/loss_scale.hpp"
#include "amp/loss_scale_optimizer.hpp"
#include "amp/policy.hpp"
#include "amp/unscale.hpp"
