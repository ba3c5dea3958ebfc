"""Decoding: one loop (`search`) with pluggable strategies (`beam_search.BeamSearch`,
`greedy.GreedySearch` with a token chooser: the most likely, or `sampling.random_token`),
the model's incremental step (`incremental`), forced decoding (`forced`), and the entry
points from source ids to target ids that export, evaluation and training share
(`model_search`). The decoding settings are one frozen `config.DecodingConfig`."""
