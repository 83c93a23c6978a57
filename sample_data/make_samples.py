"""Regenerate the bundled sample tables (synthetic, no real person in them): python make_samples.py"""

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent


def two_clusters(rng: np.random.Generator, n: int = 2000) -> pd.DataFrame:
    """A smooth two-cluster table in the unit square (the accuracy yardstick of the synth issue)."""
    centres = np.array([[0.3, 0.3], [0.7, 0.65]])
    which = rng.integers(0, 2, n)
    xy = np.clip(centres[which] + rng.normal(0, 0.1, (n, 2)), 0, 1)
    return pd.DataFrame({"x": xy[:, 0].round(6), "y": xy[:, 1].round(6)})


def patients(rng: np.random.Generator, n: int = 5000) -> pd.DataFrame:
    """A hospital-like table: integer age, blood pressure and cholesterol that depend on age."""
    age = rng.integers(18, 91, n)
    bp = np.clip(100 + 0.5 * age + rng.normal(0, 12, n), 80, 220).round(1)
    chol = np.clip(150 + 0.8 * age + rng.normal(0, 30, n), 100, 350).round(1)
    return pd.DataFrame({"age": age, "systolic_bp": bp, "cholesterol": chol})


if __name__ == "__main__":
    rng = np.random.default_rng(20261122)
    two_clusters(rng).to_csv(HERE / "two_clusters.csv", index=False)
    patients(rng).to_csv(HERE / "patients.csv", index=False)
