"""Translate through TF Serving's REST or gRPC API (TensorFlow Serving or `python -m app.serve`).

    python -m app.client "A man rides a bike." --url http://localhost:8501
    python -m app.client "A man rides a bike." --grpc localhost:8500 --label stable
    python -m app.client --nbest "A man rides a bike."          # every hypothesis, best first
    python -m app.client < sentences.txt > translations.txt     # one line in, one line out
    python -m app.client --scores --alpha 1.0 "A man rides a bike."
    python -m app.client --model-name en-de "A man rides a bike."   # the server's --model_name
    python -m app.client --glossary terms.tsv < sentences.txt       # steered (docs/steering.md)
    python -m app.client --constraints phrases.txt --prefixes starts.txt --alpha 0.6 < sentences.txt

Prints one translation per input line (with --scores: score, a tab, the translation).
Over REST, standard library only; over gRPC, grpcio and TF Serving's protos (never
TensorFlow's runtime: app/serving/protos.py).

Steering: --constraints, --prefixes, --glossary and --no-repeat-ngram-size (as
app.translate takes them, their files line by line beside the input lines) send the
`constrained` signature, which needs every one of its inputs, the decoding settings
too. --alpha and --max-extra-length are sent where given; where not, the export's own,
which only `python -m app.serve` says, at /page.json over REST for the newest version of
its first model: the request then goes to that version. Elsewhere (TF Serving, gRPC,
--label, another model or version) the client cannot know the export's alpha and
refuses to guess: give --alpha (a guess would change the translations of every line,
steered or not, against what the other signatures give); --max-extra-length is then
DecodingConfig's, as for every export that does not record its own. Where a line's
constraints could not all be met, standard error names it; its translation is printed.
"""

import argparse
import dataclasses
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

from app.cli.flag_types import FlagError, add_hidden_alias, float_at_least, int_at_least, model_name, positive_int
from app.cli.steering import SteeringFlags, add_steering_arguments, read_steering, steering_from_args
from app.export.locate import DEFAULT_MODEL_NAME
from app.decoding.config import DecodingConfig


class ClientError(RuntimeError):
    pass


def predict(url, model, instances, signature_name=None, version=None, timeout=60.0, label=None):
    """POSTs `{"instances": ...}` to the model's :predict endpoint; returns the predictions."""
    path = f"/v1/models/{model}"
    if version is not None:
        path += f"/versions/{version}"
    elif label is not None:
        path += f"/labels/{urllib.parse.quote(label, safe='')}"
    path += ":predict"
    payload = {"instances": instances}
    if signature_name:
        payload["signature_name"] = signature_name
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):  # "localhost:8501", say
        raise ClientError(f"--url {url!r} is not an http:// or https:// URL")
    request = urllib.request.Request(
        url.rstrip("/") + path, data=json.dumps(payload).encode("utf-8"), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        try:
            message = json.loads(error.read())["error"]
        except (ValueError, KeyError, TypeError):
            message = error.reason
        raise ClientError(f"{url}{path}: HTTP {error.code}: {message}") from None
    except urllib.error.URLError as error:
        raise ClientError(f"cannot reach {url}: {error.reason}") from None
    except OSError as error:  # a timeout or a reset once connected, which urllib does not wrap
        raise ClientError(f"{url}{path}: {error or type(error).__name__}") from None
    # A URL that is some other web server answers 200 too, with a page.
    try:
        return json.loads(body)["predictions"]
    except (ValueError, KeyError, TypeError):
        shown = body[:80].decode("utf-8", "replace")
        raise ClientError(f"{url}{path} did not answer as TF Serving does (no \"predictions\"): {shown!r}") from None


def predict_grpc(address, model, instances, signature_name=None, version=None, timeout=60.0, label=None):
    """`predict` over TF Serving's gRPC API at `address` (host:port): the instances go as
    one tensor per input, and the answer comes back as the REST API's rows."""
    import grpc
    import numpy as np

    from app.serving.protos import apis
    from app.serving.tensor_proto import to_array, to_tensor_proto

    request = apis.predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature_name or ""
    if version is not None:
        request.model_spec.version.value = version
    elif label is not None:
        request.model_spec.version_label = label
    rows = [row if isinstance(row, dict) else {"inputs": row} for row in instances]
    for name in rows[0]:
        values = [row[name] for row in rows]
        if isinstance(values[0], str):
            array = np.array([value.encode("utf-8") for value in values], dtype=object)
        else:  # translate's numbers: ints for the int32 inputs, floats for the float32 ones
            array = np.array(values, dtype=np.int32 if isinstance(values[0], int) else np.float32)
        request.inputs[name].CopyFrom(to_tensor_proto(array))
    with grpc.insecure_channel(address) as channel:
        stub = apis.prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.Predict(request, timeout=timeout)
        except grpc.RpcError as error:
            raise ClientError(f"{address}: {error.code().name}: {error.details()}") from None
    outputs = {name: to_array(tensor, name) for name, tensor in response.outputs.items()}
    decoded = {
        name: np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(array).tolist()
        if array.dtype == object else array.tolist()
        for name, array in outputs.items()
    }
    return [{name: decoded[name][i] for name in decoded} for i in range(len(rows))]


def translate(url, model, sentences, nbest=False, alpha=None, max_extra_length=None, version=None, label=None,
              grpc_address=None):
    """A list with, per sentence, its hypotheses as `(translation, score)` pairs, best first.

    With `alpha` or `max_extra_length`, through the translate_with_options signature, which
    takes both: the other one is then `DecodingConfig`'s default. Over gRPC where
    `grpc_address` (host:port) is given, else over REST at `url`.
    """
    if alpha is not None or max_extra_length is not None:
        signature = "translate_with_options"
        # A float and an int, as the signature's inputs are typed: gRPC sends them so.
        alpha = float(DecodingConfig.alpha if alpha is None else alpha)
        max_extra_length = int(DecodingConfig.max_extra_length if max_extra_length is None else max_extra_length)
        instances = [{"inputs": s, "alpha": alpha, "max_extra_length": max_extra_length} for s in sentences]
    else:
        signature = "nbest" if nbest else None
        instances = list(sentences)
    url, predictions = _predictions(url, grpc_address, model, instances, signature, version=version, label=label)
    hypotheses = []
    for i, p in enumerate(predictions):
        try:
            texts, scores = p["translations"], p["scores"]
            if signature != "nbest":
                texts, scores = [texts], [scores]
            pairs = list(zip(texts, scores, strict=True))
            if not pairs or not all(isinstance(t, str) and isinstance(x, (int, float)) for t, x in pairs):
                raise TypeError
        except (KeyError, TypeError, ValueError):
            raise ClientError(
                f"{url} answered prediction {i} as {json.dumps(p)[:80]}, not translations (strings) and scores"
            ) from None
        hypotheses.append(pairs)
    return hypotheses


def _predictions(url, grpc_address, model, instances, signature, *, version, label):
    """`(where, predictions)`: the answer to `instances`, over gRPC where `grpc_address`
    is given, else over REST at `url`; one prediction per instance, or ClientError."""
    if grpc_address:
        url = grpc_address
        predictions = predict_grpc(grpc_address, model, instances, signature, version, label=label)
    else:
        predictions = predict(url, model, instances, signature, version, label=label)
    # Each input line must get its own output line: a short or odd answer is an error,
    # not translations that no longer line up with their sources.
    if not isinstance(predictions, list) or len(predictions) != len(instances):
        count = len(predictions) if isinstance(predictions, list) else type(predictions).__name__
        raise ClientError(f"{url} answered {count} predictions for {len(instances)} sentences")
    return url, predictions


def translate_steered(url, model, sentences, steering, settings, version=None, label=None, grpc_address=None):
    """Per sentence, `(translation, score, constraints_met)` through the constrained signature.

    Args:
        sentences: the texts, a list.
        steering: one `app.cli.steering.SentenceSteering` per sentence.
        settings: `(alpha, max_extra_length)`, sent with every sentence (`constrained_settings`).
    """
    alpha, max_extra_length = settings
    instances = [
        {"inputs": sentence, "prefixes": steer.prefix, "constraints": steer.constraints,
         # An int and a float, as the signature's inputs are typed: gRPC sends them so.
         "no_repeat_ngram_size": int(steer.no_repeat_ngram_size), "alpha": float(alpha),
         "max_extra_length": int(max_extra_length)}
        for sentence, steer in zip(sentences, steering, strict=True)
    ]
    url, predictions = _predictions(
        url, grpc_address, model, instances, "constrained", version=version, label=label
    )
    results = []
    for i, p in enumerate(predictions):
        try:
            text, score, met = p["translations"], p["scores"], p["constraints_met"]
            if not (isinstance(text, str) and isinstance(score, (int, float)) and isinstance(met, bool)):
                raise TypeError
        except (KeyError, TypeError):
            raise ClientError(
                f"{url} answered prediction {i} as {json.dumps(p)[:80]}, not a translation (a string), a score "
                "and constraints_met (true or false)"
            ) from None
        results.append((text, score, met))
    return results


def page_info(url, timeout=10.0):
    """`python -m app.serve`'s /page.json at `url` (the version it serves without one, its
    export's decoding settings), or None where the server has none (TF Serving, nginx)."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ClientError(f"--url {url!r} is not an http:// or https:// URL")
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/page.json", timeout=timeout) as response:
            info = json.loads(response.read())
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as error:
        raise ClientError(f"cannot reach {url}: {error.reason}") from None
    except (OSError, ValueError):  # a reset once connected; an answer that is not JSON
        return None
    return info if isinstance(info, dict) else None


def constrained_settings(plan):
    """`((alpha, max_extra_length), version)` of the plan's constrained requests: the flags
    where given, else the export's own where `page_info` says them for the model and
    version asked for (the requests then name that version, so that the settings are its
    own). No guess at alpha: without --alpha and /page.json's, a ClientError.
    """
    alpha, max_extra_length, version = plan.alpha, plan.max_extra_length, plan.version
    if alpha is None or max_extra_length is None:
        info = None if plan.grpc_address or plan.label is not None else page_info(plan.url)
        if info and info.get("model_name") == plan.model_name and version in (None, _int(info.get("version"))):
            version = _int(info.get("version"))
            alpha = alpha if alpha is not None else info.get("alpha")
            max_extra_length = max_extra_length if max_extra_length is not None else info.get("max_extra_length")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        where = plan.grpc_address or plan.url
        flags = " and ".join(plan.steering.given())
        raise ClientError(
            f"{flags}: the constrained signature needs the length penalty alpha with every sentence, and {where} "
            "does not say the export's (python -m app.serve does, over REST, for the newest version of its first "
            "model): give --alpha (export.py wrote it in the version's export_info.json)"
        )
    if not isinstance(max_extra_length, int) or isinstance(max_extra_length, bool):
        max_extra_length = DecodingConfig.max_extra_length  # the export's when it records none
    return (float(alpha), max_extra_length), version


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sentences", nargs="*", help="sentences to translate (default: read lines from stdin)")
    parser.add_argument("--url", default="http://localhost:8501", help="the server (default http://localhost:8501)")
    name = parser.add_argument(
        "--model-name",
        type=model_name,
        default=DEFAULT_MODEL_NAME,
        help=f"the model's name, the server's --model_name (default {DEFAULT_MODEL_NAME})",
    )
    add_hidden_alias(parser, name, "--model")  # its name before; scripts that use it keep working
    parser.add_argument(
        "--grpc",
        metavar="HOST:PORT",
        help="use TF Serving's gRPC API at this address, e.g. localhost:8500, in place of --url (default: REST)",
    )
    parser.add_argument("--version", type=int_at_least(0), help="a specific version (default: the newest served)")
    parser.add_argument(
        "--label", help="the version a label names, e.g. stable (the server's version_labels; default: the newest)"
    )
    parser.add_argument(
        "--nbest", action="store_true", help="print every hypothesis (signature nbest; default: the best)"
    )
    parser.add_argument(
        "--scores", action="store_true", help="print each score before its translation (default: translations only)"
    )
    parser.add_argument(
        "--alpha",
        type=float_at_least(0),
        help="length penalty (signature translate_with_options, or constrained when steered; default: the "
        "model's, as exported)",
    )
    parser.add_argument(
        "--max-extra-length",
        type=positive_int,
        help="output length beyond the input's (translate_with_options, or constrained; default: the model's, "
        "as exported)",
    )
    parser.add_argument("--batch-size", type=positive_int, default=32, help="stdin lines per request (default 32)")
    add_steering_arguments(parser)
    args = parser.parse_args(argv)
    if args.nbest and (args.alpha is not None or args.max_extra_length is not None):
        parser.error("--nbest cannot be combined with --alpha or --max-extra-length")
    steering = SteeringFlags.of(args).given()
    if args.nbest and steering:
        parser.error(f"--nbest cannot be combined with {' and '.join(steering)}: the constrained signature gives "
                     "the best translation only")
    if args.version is not None and args.label is not None:
        parser.error("--version and --label both name a version: give one")
    if args.grpc is not None and not re.fullmatch(r"\[?[\w.:-]+\]?:\d+", args.grpc):
        parser.error(f"--grpc {args.grpc!r}: give HOST:PORT, e.g. localhost:8500")
    return args


@dataclasses.dataclass(frozen=True)
class ClientPlan:
    """What the client asks of which server, as its flags describe it (`plan_client`)."""

    # The server (--url over REST, --grpc HOST:PORT over gRPC), the model's name there
    # (--model-name), and a version (--version, or the one --label names; None: the newest).
    url: str
    grpc_address: Optional[str]
    model_name: str
    version: Optional[int]
    label: Optional[str]
    # The sentences given on the command line; () reads standard input's lines, sent
    # --batch-size lines per request.
    sentences: tuple
    batch_size: int
    # Every hypothesis, through the nbest signature (--nbest), and each one's score (--scores).
    nbest: bool
    scores: bool
    # translate_with_options' and constrained's settings (--alpha, --max-extra-length);
    # None: the model's, as exported.
    alpha: Optional[float]
    max_extra_length: Optional[int]
    # The constrained signature's steering (--constraints, --prefixes, --glossary,
    # --no-repeat-ngram-size), or None.
    steering: Optional[SteeringFlags] = None


def plan_client(args):
    """The `ClientPlan` of parsed app.client flags `args` (left as they are).

    Raises:
        FlagError: a steering file flag that names no file.
    """
    return ClientPlan(
        url=args.url, grpc_address=args.grpc, model_name=args.model_name, version=args.version, label=args.label,
        sentences=tuple(args.sentences),
        batch_size=args.batch_size, nbest=args.nbest, scores=args.scores, alpha=args.alpha,
        max_extra_length=args.max_extra_length, steering=steering_from_args(args),
    )


def read_lines(stream):
    """The lines of a binary stream as text, "\n" or "\r\n" removed; a line that is not
    UTF-8 is an error naming it (it would otherwise fail its whole request)."""
    lines = []
    for number, raw in enumerate(stream, start=1):
        try:
            lines.append(raw.decode("utf-8").removesuffix("\n").removesuffix("\r"))
        except UnicodeDecodeError as error:
            raise ClientError(f"standard input, line {number}: not valid UTF-8 ({error.reason})") from None
    # Text whose lines end with a lone "\r" (classic Mac OS) would go as one sentence, and
    # its translation come back as one line (as data.text_files.read_lines refuses it).
    if len(lines) == 1 and not raw.endswith(b"\n") and "\r" in lines[0]:
        raise ClientError(
            "standard input: its lines end with a lone carriage return (\\r), which does not end a line here "
            "(only \\n or \\r\\n does); convert its line ends to \\n (e.g. with tr '\\r' '\\n')"
        )
    return lines


def main(argv=None):
    try:
        plan = plan_client(parse_args(argv))
    except FlagError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        lines = list(plan.sentences) or read_lines(sys.stdin.buffer)
        if plan.steering:
            return _print_steered(plan, lines)
        for start in range(0, len(lines), plan.batch_size):
            batch = lines[start : start + plan.batch_size]
            for hypotheses in translate(
                plan.url, plan.model_name, batch, nbest=plan.nbest, alpha=plan.alpha,
                max_extra_length=plan.max_extra_length, version=plan.version, label=plan.label,
                grpc_address=plan.grpc_address,
            ):
                for text, score in hypotheses:
                    print(f"{score:.4f}\t{text}" if plan.scores else text)
                if plan.nbest:
                    print()  # a blank line between the n-best lists of two inputs
            sys.stdout.flush()
    except ClientError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def _print_steered(plan, lines):
    """Prints the constrained signature's translations of `lines`, steered as the plan's
    files say (each read whole and checked against the lines before any request), and
    names on standard error each line whose constraints were not all met. Returns the
    exit status."""
    from data.errors import DataError

    input_name = "the sentences given" if plan.sentences else "standard input"
    try:
        steering = read_steering(plan.steering, lines, input_name)
    except FlagError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except DataError as error:  # a file that is not UTF-8; a malformed glossary
        raise ClientError(str(error)) from None
    settings, version = constrained_settings(plan)
    for start in range(0, len(lines), plan.batch_size):
        end = start + plan.batch_size
        results = translate_steered(
            plan.url, plan.model_name, lines[start:end], steering[start:end], settings, version=version,
            label=plan.label, grpc_address=plan.grpc_address,
        )
        for number, (text, score, met) in enumerate(results, start=start + 1):
            print(f"{score:.4f}\t{text}" if plan.scores else text)
            if not met:
                print(f"warning: line {number}: no translation within the length limit holds every constraint; "
                      "the best one found is printed", file=sys.stderr)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
