"""tf.keras: tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(learning_rate=0), dynamic=True)
(an SGD of the current optimizer API, so the object is a LossScaleOptimizerV3) on one tf.Variable, eagerly.
Each step scales a loss with get_scaled_loss and unscales the gradient with get_unscaled_gradients, as a
training loop does (apply_gradients warns otherwise); the gradient is finite or holds an inf. Then
apply_gradients([(grad, var)]) updates the loss scale and applies the step, or skips it while still
advancing the inner optimizer's iterations. Values are read through the optimizer's getters: loss_scale
(float32), dynamic_counter (int64) and iterations (the inner optimizer's)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

PRESET = "tf_keras"
CAN = {"initial_scale", "growth_interval"}
DEFAULTS = dict(initial_scale=2.0**15, growth_interval=2000)
GRADS = {True: tf.constant([1.0, 2.0]), False: tf.constant([1.0, float("inf")])}


def header():
    return dict(library="tf_keras", version=tf_keras.__version__, preset=PRESET,
                object="tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD, dynamic=True) "
                       "(LossScaleOptimizerV3, eager; tensorflow %s)" % tf.__version__,
                scale_kept_as="float32",
                values={"scale": "loss_scale", "growth_counter": "dynamic_counter",
                        "optimizer_iterations": "iterations (the inner optimizer's)"})


class Driver:
    def __init__(self, options):
        o = dict(DEFAULTS, **options)
        self.var = tf.Variable([0.0, 0.0])
        self.opt = tf_keras.mixed_precision.LossScaleOptimizer(
            tf_keras.optimizers.SGD(learning_rate=0.0), dynamic=True, initial_scale=o["initial_scale"],
            dynamic_growth_steps=o["growth_interval"])
        assert type(self.opt).__name__ == "LossScaleOptimizerV3", type(self.opt)


def make(options):
    return Driver(options)


def step(d, finite):
    d.opt.get_scaled_loss(tf.constant(1.0))
    (grad,) = d.opt.get_unscaled_gradients([GRADS[finite]])
    d.opt.apply_gradients([(grad, d.var)])


def read(d):
    scale = d.opt.loss_scale
    assert scale.dtype == tf.float32
    return {"scale": float(scale.numpy()), "growth_counter": int(d.opt.dynamic_counter.numpy()),
            "optimizer_iterations": int(d.opt.iterations.numpy())}
