"""Decoding: cached beam search (`beam_search`), greedy decoding (`greedy`) and the
source-ids-to-target-ids entry point the export and evaluation share (`translate`)."""
