"""Call a translation server's REST API from Python, with the standard library only.

    python -m app.serve &                                   # or TensorFlow Serving itself
    python examples/rest_api_client.py http://localhost:8501 "A dog runs." "Two men talk."

The API is TensorFlow Serving's: `POST /v1/models/NAME:predict` with a JSON body, in the
row format ({"instances": [...]}) or the columnar one ({"inputs": ...}). The answer is
{"predictions": [...]} or {"outputs": ...} respectively, or {"error": "..."} with an HTTP
error status.
"""

import json
import sys
import urllib.error
import urllib.request


def predict(url, body, model="translator"):
    """The parsed answer of one predict request; raises RuntimeError with the server's error."""
    request = urllib.request.Request(
        f"{url}/v1/models/{model}:predict",
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"HTTP {error.code}: {json.load(error).get('error')}") from None


def main(url, sentences):
    # Row format: one object per sentence; each prediction holds that sentence's outputs.
    rows = predict(url, {"instances": sentences})["predictions"]
    print("serving_default (row format)")
    for row in rows:
        print(f"  {row['scores']:8.4f}  {row['translations']}")

    # Columnar format, another signature: every hypothesis of every sentence.
    columns = predict(url, {"signature_name": "nbest", "inputs": sentences})["outputs"]
    print("\nnbest (columnar format)")
    for sentence, hypotheses in zip(sentences, columns["translations"]):
        print(f"  {sentence}: {' | '.join(hypotheses)}")

    # Decoding settings per instance, through the signature that takes them.
    instances = [{"inputs": sentence, "alpha": 1.0, "max_extra_length": 10} for sentence in sentences]
    options = predict(url, {"signature_name": "translate_with_options", "instances": instances})["predictions"]
    print("\ntranslate_with_options (alpha 1.0)")
    for row in options:
        print(f"  {row['translations']}")

    # Errors come back as JSON with TensorFlow Serving's status code.
    try:
        predict(url, {"instances": sentences, "signature_name": "no_such_signature"})
    except RuntimeError as error:
        print(f"\na bad request: {error}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
