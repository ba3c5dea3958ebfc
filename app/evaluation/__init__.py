"""Scoring translations against references: the BLEU variants and chrF that
`python -m app.evaluate` prints and the export's choice of alpha reads, and the
in-order, length-batched decoding of a list of sentences both of them run; the paired
bootstrap test by which the export may take a smaller alpha than the best (significance.py)."""
