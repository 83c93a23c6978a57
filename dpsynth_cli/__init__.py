"""dpsynth: differentially private synthetic data with W1 guarantees."""

__version__ = "0.1.0"
