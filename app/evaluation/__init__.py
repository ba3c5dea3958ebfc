"""Scoring translations against references: the BLEU variants and chrF that
`python -m app.evaluate` prints and the export's choice of alpha reads, and the
in-order, length-batched decoding of a list of sentences both of them run."""
