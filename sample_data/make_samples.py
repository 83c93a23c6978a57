"""Regenerate the bundled sample tables (synthetic, no real person in them).

Run: python make_samples.py
"""

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
SEED = 20261122


def two_clusters(rng: np.random.Generator, n: int = 2000) -> pd.DataFrame:
    """A smooth two-cluster table in the unit square (the accuracy yardstick of the synth issue)."""
    centres = np.array([[0.3, 0.3], [0.7, 0.65]])
    which = rng.integers(0, 2, n)
    xy = np.clip(centres[which] + rng.normal(0, 0.1, (n, 2)), 0, 1)
    return pd.DataFrame({"x": xy[:, 0].round(6), "y": xy[:, 1].round(6)})


def patients(rng: np.random.Generator, n: int = 5000) -> pd.DataFrame:
    """A hospital-like table: integer age (most patients are older: a bell around 60, not
    uniform on the bounds), blood pressure and cholesterol that depend on age."""
    age = np.clip(np.round(rng.normal(60, 16, n)), 18, 90).astype(np.int64)
    bp = np.clip(100 + 0.5 * age + rng.normal(0, 12, n), 80, 220).round(1)
    chol = np.clip(150 + 0.8 * age + rng.normal(0, 30, n), 100, 350).round(1)
    return pd.DataFrame({"age": age, "systolic_bp": bp, "cholesterol": chol})


WARDS = ["cardiology", "surgery", "maternity", "oncology", "other"]


def admissions(rng: np.random.Generator, n: int = 4000) -> pd.DataFrame:
    """A mixed table (issue 15): category, boolean (some unknown), date, datetime, integer.

    Maternity admits women of 18-45; stays depend on the ward; a few wards are not among the
    declared levels ("icu", "geriatrics": they become "other" in synth) and a few smoker cells
    are empty (the schema declares smoker nullable)."""
    ward = rng.choice(WARDS[:4] + ["icu", "geriatrics"], n, p=[0.3, 0.3, 0.15, 0.2, 0.03, 0.02])
    maternity = ward == "maternity"
    sex = np.where(maternity, "F", rng.choice(["F", "M"], n))
    age = np.where(maternity, rng.integers(18, 46, n), rng.integers(18, 96, n))
    stay = np.clip(rng.poisson(np.where(ward == "surgery", 6, 3)), 0, 60)
    smoker = np.where(rng.random(n) < 0.25, "true", "false").astype(object)
    smoker[rng.random(n) < 0.05] = ""
    day = pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 366, n), unit="D")
    hour = np.where(rng.random(n) < 0.7, rng.normal(11, 2, n), rng.uniform(0, 24, n)).clip(0, 23.9)
    at = day + pd.to_timedelta((hour * 3600).round(), unit="s")
    return pd.DataFrame(
        {
            "age": age,
            "sex": sex,
            "ward": ward,
            "admitted_at": at.strftime("%Y-%m-%dT%H:%M:%S"),
            "discharged": (day + pd.to_timedelta(stay, unit="D")).strftime("%Y-%m-%d"),
            "smoker": smoker,
            "length_of_stay": stay,
        }
    )


if __name__ == "__main__":
    rng = np.random.default_rng(SEED)
    two_clusters(rng).to_csv(HERE / "two_clusters.csv", index=False)
    patients(rng).to_csv(HERE / "patients.csv", index=False)
    admissions(rng).to_csv(HERE / "admissions.csv", index=False)
