"""One peer run, in a process of its own (so a time cap can end it), on files.

    PYTHON benchmarks/real_tables/peer_worker.py JOB.json

JOB.json: {"peer", "eps", "seed", "rows" (to sample), "codes" (an .npy of value codes),
"domain" (`encode.peer_domain`), "out" (.npy to write), "meta" (.json to write)}. Run by the
bench environment's python for smartnoise-synth and by the dpmm environment's for dpmm (which
pins numpy 1.26, so this file imports neither dpsynth nor anything but numpy, pandas and the
peer). Every peer gets the same public domain: levels as declared, numbers on their bounds.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encode  # noqa: E402  (this folder, as a script: no package import here)

DELTA = 1e-9  # smartnoise-synth's default; given to dpmm's MST and AIM too (PrivBayes: pure)
PRIVTREE_SHARE = 0.1  # dpmm's PrivTree bins: this share of eps (dpmm's default 0.1 of 1)


def smartnoise(kind: str, frame: pd.DataFrame, domain: list[dict], job: dict) -> pd.DataFrame:
    """smartnoise-synth MST / AIM: levels as labels, numbers in PEER_BINS equal bins of their
    public bounds (BinTransformer with lower/upper: no preprocessing budget), a uniform point
    inside each sampled bin."""
    from snsynth import Synthesizer
    from snsynth.transform import BinTransformer, LabelTransformer, TableTransformer

    np.random.seed(job["seed"] % 2**32)  # noqa: NPY002  (MST/AIM draw from numpy's global one)
    transformers = [
        LabelTransformer(nullable=False)
        if c["mode"] == "levels"
        else BinTransformer(
            bins=encode.PEER_BINS, lower=c["lower"], upper=c["upper"], nullable=c["nullable"]
        )
        for c in domain
    ]
    synth = Synthesizer.create(kind, epsilon=float(job["eps"]), delta=DELTA)
    synth.fit(frame, transformer=TableTransformer(transformers), preprocessor_eps=0.0)
    out = pd.DataFrame(synth.sample(job["rows"]), columns=frame.columns)
    rng = np.random.default_rng(job["seed"])
    for c in domain:  # a bin's midpoint -> a uniform point in the bin
        if c["mode"] == "number":
            width = (c["upper"] - c["lower"]) / encode.PEER_BINS
            mid = pd.to_numeric(out[c["name"]], errors="coerce").to_numpy(dtype=np.float64)
            code = np.clip(np.floor((mid - c["lower"]) / width), 0, encode.PEER_BINS - 1)
            point = c["lower"] + (code + rng.random(code.size)) * width
            out[c["name"]] = np.where(np.isnan(mid), np.nan, point)
    return out


def dpmm(kind: str, binner: str, frame: pd.DataFrame, domain: list[dict], job: dict):
    """dpmm's MST / AIM / PrivBayes pipeline with the public domain: categories as declared,
    numbers on their bounds in PEER_BINS uniform bins (no budget) or PrivTree bins (at most
    PEER_BINS, PRIVTREE_SHARE of eps); values decoded uniformly inside a bin; one job."""
    from dpmm.pipelines import AIMPipeline, MSTPipeline, PrivBayesPipeline

    pipeline = {"mst": MSTPipeline, "aim": AIMPipeline, "privbayes": PrivBayesPipeline}[kind]
    eps = float(job["eps"])
    tree = binner == "privtree"
    model = pipeline(
        epsilon=eps * (1 - PRIVTREE_SHARE) if tree else eps,
        delta=DELTA,
        n_jobs=1,
        binner_type="priv-tree" if tree else "uniform",
        proc_epsilon=eps * PRIVTREE_SHARE if tree else None,
        n_bins=encode.PEER_BINS,
    )
    public = {
        c["name"]: {"categories": encode.labels(c)}
        if c["mode"] == "levels"
        else {"lower": c["lower"], "upper": c["upper"]}
        for c in domain
    }
    model.fit(frame, domain=public, random_state=job["seed"])
    return model.generate(n_records=job["rows"], random_state=job["seed"] + 1)


def main(path: str) -> None:
    job = json.loads(Path(path).read_text())
    domain = job["domain"]
    frame = encode.to_frame(np.load(job["codes"]), domain)
    start = time.process_time()
    family, _, rest = job["peer"].partition("-")  # sn-mst, dpmm-aim-uniform, ...
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if family == "sn":
            out = smartnoise(rest, frame, domain, job)
        else:
            kind, _, binner = rest.partition("-")
            out = dpmm(kind, binner, frame, domain, job)
    np.save(job["out"], encode.from_frame(out, domain))
    Path(job["meta"]).write_text(json.dumps({"cpu_s": time.process_time() - start}))


if __name__ == "__main__":
    main(sys.argv[1])
