"""The one exception type for bad data input.

Everything the data package rejects (a missing file, files whose line counts differ,
bytes that are not UTF-8, an unknown dataset or language pair, impossible batch
settings) raises `DataError` before any training starts. It subclasses `ValueError`, so
a caller that already catches `ValueError` keeps working; entry points print it and exit
non-zero:

    try:
        data = prepare_data(config, model_dir)
    except DataError as error:
        sys.exit(f"error: {error}")
"""


class DataError(ValueError):
    """Bad input data or data settings; the message names the bad value."""


def first_line(error):
    """The first line of an exception's message, for a one-line report of an error from a
    library (TensorFlow, TFDS); its type's name when the message is empty."""
    text = str(getattr(error, "message", error)).strip()
    return text.splitlines()[0] if text else type(error).__name__
