"""Decoding: one loop (`search`) with pluggable strategies (`beam_search.BeamSearch`,
`greedy.GreedySearch`, `sampling.SamplingSearch`), what steers any of them (`steering`: a
target prefix, no repeated n-grams), the model's incremental step (`incremental`), forced
decoding (`forced`), word alignments from cross-attention (`alignment`; `word_links`, its
rule in numpy), the truncation of a source longer than the model reads (`truncation`), and
the entry points from source ids to target ids that export, evaluation and training share
(`model_search`). The decoding settings are one frozen `config.DecodingConfig`, each checked
by the one rule of `config.RULES`."""
