#!/usr/bin/env python3
"""Make a small dataset of NumPy arrays for `mixprec-train --train-data`.

    python3 examples/arrays/make_arrays.py DIR [--train 6000] [--test 1000] [--seed 0]

Writes DIR/train_x.npy, DIR/train_y.npy, DIR/test_x.npy and DIR/test_y.npy: 28x28 grayscale images
(uint8, shape (n, 28, 28)) and their labels (int64, shape (n,)) in 10 classes. An image of class c
shows a bright bar across row 2 + 2c, one row higher or lower one time in five each (so neighbouring
classes share a row and cannot always be told apart: about 82% is the best accuracy possible), at a
random brightness and column range, over noise.
Any array of that shape and dtype (or float32 in [0, 1]) trains the same way, e.g. your own images.

Needs NumPy (Debian: python3-numpy).
"""

import argparse
import os

import numpy as np


def make(n, rng):
    images = rng.integers(0, 60, size=(n, 28, 28), dtype=np.uint8)  # noise
    labels = rng.integers(0, 10, size=n, dtype=np.int64)
    for image, label in zip(images, labels):
        start = rng.integers(0, 10)
        row = 2 + 2 * label + rng.choice([-1, 0, 1], p=[0.2, 0.6, 0.2])
        image[row, start:start + 18] = rng.integers(160, 256)
    return images, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--train", type=int, default=6000)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    for split, n in (("train", args.train), ("test", args.test)):
        images, labels = make(n, rng)
        np.save(os.path.join(args.dir, split + "_x.npy"), images)
        np.save(os.path.join(args.dir, split + "_y.npy"), labels)
        print("%s: %s images %s, labels %s" % (split, images.dtype, images.shape, labels.shape))


if __name__ == "__main__":
    main()
