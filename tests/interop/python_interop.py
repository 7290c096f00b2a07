#!/usr/bin/env python3
"""mixprec's files against the Python ecosystem's readers and writers.

    python_interop.py TRAINER WORKDIR [--data DIR]

1. mixprec-train exports an MLP's weights (--export-weights) in float32, float16 and bfloat16; the
   `safetensors` package loads each and finds every variable under its name, with its shape and dtype,
   and the float16/bfloat16 values equal to the float32 ones rounded once (to nearest even); np.load
   reads the same weights exported as an .npz.
2. The `safetensors` package writes those arrays again (in its own order and layout); mixprec-train
   loads that file (--initial-weights), trains nothing (--epochs 0) and exports it: every tensor comes
   back bit for bit.
3. With PyTorch installed: the weights go into the same MLP built from torch.nn, which classifies the
   Fashion-MNIST test set; mixprec-train's predictions (--predictions, a .npy of logits) agree with
   PyTorch's within the float32 bound derived below, and so do the accuracies.

Exit status: 0 when every check passed, 1 on a failure, 77 when `safetensors` or NumPy is missing
(the ctest that runs this script reports it as skipped). PyTorch is optional (step 3 is skipped
without it). Needs packages from PyPI in a virtual environment outside the source tree:
    pip install safetensors numpy torch
"""

import argparse
import gzip
import os
import subprocess
import sys

try:
    import numpy as np
    from safetensors.numpy import load_file, save_file
except ImportError as error:
    print("python_interop: %s; skipped (pip install safetensors numpy)" % error)
    sys.exit(77)

try:
    import torch
    from safetensors.torch import load_file as torch_load_file
except ImportError:
    torch = None

FAILURES = []


def check(condition, what):
    print("%s: %s" % ("ok" if condition else "FAILED", what))
    if not condition:
        FAILURES.append(what)


def train(trainer, *args):
    command = [trainer, "--model", "mlp", "--precision", "float32", "--quiet", "--threads", "1"] + list(args)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("python_interop: %s failed (%d):\n%s%s"
                 % (" ".join(command), result.returncode, result.stdout, result.stderr))
    return result.stdout


def bits(array):
    """The array's bytes, for bit-for-bit comparison."""
    return np.ascontiguousarray(array).tobytes()


def exported_weights(trainer, work, data):
    """Step 1: mixprec's exports, read by the safetensors package."""
    path = os.path.join(work, "mixprec-f32.safetensors")
    train(trainer, "--epochs", "1", "--max-steps", "20", "--data", data, "--export-weights", path)
    weights = load_file(path)
    expected = {"dense/kernel": (784, 512), "dense/bias": (512,), "dense_1/kernel": (512, 512),
                "dense_1/bias": (512,), "dense_2/kernel": (512, 10), "dense_2/bias": (10,)}
    check({name: a.shape for name, a in weights.items()} == expected,
          "the float32 export holds the MLP's variables by name and shape: %s"
          % sorted((n, a.shape) for n, a in weights.items()))
    check(all(a.dtype == np.float32 for a in weights.values()), "every tensor is float32")

    path16 = os.path.join(work, "mixprec-f16.safetensors")
    train(trainer, "--epochs", "0", "--data", data, "--initial-weights", path,
          "--export-weights", path16, "--export-dtype", "float16")
    half = load_file(path16)
    check(all(half[n].dtype == np.float16 and bits(half[n]) == bits(weights[n].astype(np.float16))
              for n in weights),
          "the float16 export is the float32 weights rounded to nearest even (NumPy's astype)")
    path_npz = os.path.join(work, "mixprec.npz")
    train(trainer, "--epochs", "0", "--data", data, "--initial-weights", path, "--export-weights", path_npz)
    with np.load(path_npz) as npz:
        check(sorted(npz.files) == sorted(weights) and all(bits(npz[n]) == bits(weights[n]) for n in weights),
              "the .npz export loads with np.load: the same arrays, bit for bit")
    if torch is not None:
        path_bf16 = os.path.join(work, "mixprec-bf16.safetensors")
        train(trainer, "--epochs", "0", "--data", data, "--initial-weights", path,
              "--export-weights", path_bf16, "--export-dtype", "bfloat16")
        brain = torch_load_file(path_bf16)
        check(all(brain[n].dtype == torch.bfloat16
                  and torch.equal(brain[n], torch.from_numpy(weights[n]).to(torch.bfloat16))
                  for n in weights),
              "the bfloat16 export is the float32 weights rounded to nearest even (PyTorch's .to)")
    return path, weights


def written_by_python(trainer, work, data, weights):
    """Step 2: a file the safetensors package wrote, through mixprec and back."""
    path = os.path.join(work, "python.safetensors")
    save_file({name: np.ascontiguousarray(a) for name, a in weights.items()}, path,
              metadata={"producer": "safetensors (Python)"})
    back = os.path.join(work, "back.safetensors")
    train(trainer, "--epochs", "0", "--data", data, "--initial-weights", path, "--export-weights", back)
    again = load_file(back)
    check(sorted(again) == sorted(weights) and all(bits(again[n]) == bits(weights[n]) for n in weights),
          "a file written by the safetensors package loads into mixprec and comes back bit for bit")


def test_images(data):
    with gzip.open(os.path.join(data, "t10k-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(data, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    return images.astype(np.float32) / 255, labels


def torch_predictions(trainer, work, data, path, weights):
    """Step 3: the same MLP in PyTorch, on the test set."""
    predictions = os.path.join(work, "predictions.npy")
    train(trainer, "--epochs", "0", "--data", data, "--initial-weights", path, "--predictions", predictions)
    ours = np.load(predictions)
    x, labels = test_images(data)
    check(ours.shape == (len(labels), 10), "mixprec's predictions are (%d, 10): %s" % (len(labels), ours.shape))

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    with torch.no_grad():
        for layer, name in zip([model[0], model[2], model[4]], ["dense", "dense_1", "dense_2"]):
            layer.weight.copy_(torch.from_numpy(weights[name + "/kernel"].T))  # (in, out) -> (out, in)
            layer.bias.copy_(torch.from_numpy(weights[name + "/bias"]))
        theirs = model(torch.from_numpy(x)).numpy()

    # Both compute each layer's sums in float32 in some order: each is within gamma_k * sum|terms| of the
    # exact sum (gamma_k = k u / (1 - k u), u = 2^-24), so the two differ by at most twice that. The
    # error a layer receives grows through the next one at most by |W|^T (ReLU does not amplify it).
    u = 2.0 ** -24
    h = x.astype(np.float64)
    bound = np.zeros_like(h)
    for name in ["dense", "dense_1", "dense_2"]:
        w = weights[name + "/kernel"].astype(np.float64)
        b = weights[name + "/bias"].astype(np.float64)
        k = w.shape[0] + 1
        gamma = k * u / (1 - k * u)
        bound = bound @ np.abs(w) + 2 * gamma * (np.abs(h) @ np.abs(w) + np.abs(b))
        h = h @ w + b
        if name != "dense_2":
            h = np.maximum(h, 0)
    difference = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    check(bool(np.all(difference <= bound)),
          "PyTorch's logits agree with mixprec's within the float32 bound (largest difference %.3g, "
          "its bound there %.3g, largest bound %.3g)"
          % (difference.max(), bound.flat[difference.argmax()], bound.max()))
    # A class may differ only where the top two logits are closer than the bound allows to resolve.
    differ = ours.argmax(1) != theirs.argmax(1)
    top_two = np.sort(ours.astype(np.float64), axis=1)[:, -2:]
    near_tie = top_two[:, 1] - top_two[:, 0] <= 2 * bound.max(axis=1)
    check(bool(np.all(near_tie[differ])),
          "both pick the same class for every example but near-ties (%d differ, %d near-ties); accuracy "
          "mixprec %.4f, PyTorch %.4f" % (differ.sum(), near_tie.sum(), np.mean(ours.argmax(1) == labels),
                                          np.mean(theirs.argmax(1) == labels)))


def main():
    parser = argparse.ArgumentParser(description="mixprec's files against the Python ecosystem")
    parser.add_argument("trainer")
    parser.add_argument("work")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    path, weights = exported_weights(args.trainer, args.work, args.data)
    written_by_python(args.trainer, args.work, args.data, weights)
    if torch is None:
        print("PyTorch is not installed: the comparison of predictions is skipped")
    else:
        torch_predictions(args.trainer, args.work, args.data, path, weights)
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
