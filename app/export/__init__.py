"""The export: a versioned SavedModel whose signatures turn raw strings into raw strings.

    saved_model.py    the SavedModel: tokenizer, encoder, search and detokenizer in the graph
    alpha_search.py   the length penalty alpha chosen on the validation split
    ctranslate2.py    the same weights as a CTranslate2 model (`export.py --format ctranslate2`)
    locate.py         the SavedModel version a path names
    export_info.py    the one reader of a version's export_info.json
"""
