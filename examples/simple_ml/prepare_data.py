"""Write scikit-learn's diabetes dataset (it ships inside the package) as CSV to a URI.

Usage: python examples/simple_ml/prepare_data.py [URI]   (default: $DATA_URI)
Writes URI/diabetes.csv: ten standardised-by-sklearn features and the target, with a header.
"""

from __future__ import annotations

import io
import os
import sys

import numpy as np
from sklearn.datasets import load_diabetes

from uri_io import join, write_bytes

FILE_NAME = "diabetes.csv"


def dataset_csv() -> bytes:
    data = load_diabetes()
    table = np.column_stack([data.data, data.target])
    out = io.StringIO()
    np.savetxt(out, table, delimiter=",", header=",".join([*data.feature_names, "target"]),
               comments="", fmt="%.10g")
    return out.getvalue().encode()


def main(argv: list[str]) -> int:
    uri = argv[1] if len(argv) > 1 else os.environ.get("DATA_URI", "")
    if not uri:
        print("usage: prepare_data.py URI (or set DATA_URI)", file=sys.stderr)
        return 2
    target = join(uri, FILE_NAME)
    write_bytes(target, dataset_csv())
    print(f"wrote the diabetes dataset to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
