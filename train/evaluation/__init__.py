"""Scoring encoders: STS tasks (`sts.py`), SentEval transfer tasks (`senteval.py`),
both behind one suite (`suite.py`)."""
