"""`tensorflow.TensorProto` <-> numpy arrays, as TF Serving reads and writes them over gRPC.

    array = to_array(request.inputs["inputs"], where='input "inputs"')   # np.ndarray
    proto = to_tensor_proto(np.array([b"Ein Mann."], dtype=object))     # string_val

Without TensorFlow (`tf.make_ndarray` would load its runtime into the server process;
protos.py says why not). The rules are `tensor_util.MakeNdarray`'s and `Tensor::FromProto`'s:
values come from `tensor_content` (little-endian bytes; for strings, TensorFlow's encoded
list) or from the field of their type; fewer values than the shape holds repeat the last
one (a scalar-filled tensor), none gives zeros; more is an error. Strings are bytes, as
TensorFlow's; bools (DT_BOOL) are numpy bools, written in `bool_val` as TF Serving writes a
model's bool output. A server reads the declared type and shape first (`declared_dtype`,
`declared_shape`) and bounds the values (`to_array`'s `max_values`) before any array is
made: the shape is the client's word, not a measure of the message.
"""

import math

import numpy as np

from app.serving.protos import tensor_pb2, types_pb2
from app.serving.rest_api import ServingError

# dtype enum -> (numpy dtype, the TensorProto field that holds its values, its name in errors)
_TYPES = {
    types_pb2.DT_FLOAT: (np.float32, "float_val", "float"),
    types_pb2.DT_DOUBLE: (np.float64, "double_val", "double"),
    types_pb2.DT_INT32: (np.int32, "int_val", "int32"),
    types_pb2.DT_INT16: (np.int16, "int_val", "int16"),
    types_pb2.DT_INT8: (np.int8, "int_val", "int8"),
    types_pb2.DT_UINT8: (np.uint8, "int_val", "uint8"),
    types_pb2.DT_INT64: (np.int64, "int64_val", "int64"),
    types_pb2.DT_UINT32: (np.uint32, "uint32_val", "uint32"),
    types_pb2.DT_UINT64: (np.uint64, "uint64_val", "uint64"),
    types_pb2.DT_BOOL: (np.bool_, "bool_val", "bool"),
    types_pb2.DT_STRING: (np.object_, "string_val", "string"),
}
_ENUM_OF_DTYPE = {np.dtype(dtype): enum for enum, (dtype, _, _) in _TYPES.items()}


def dtype_name(dtype):
    """TensorFlow's name of a numpy dtype ("string" for object arrays of bytes)."""
    enum = _ENUM_OF_DTYPE.get(np.dtype(dtype))
    return _TYPES[enum][2] if enum is not None else np.dtype(dtype).name


def declared_dtype(proto, where):
    """The numpy dtype of a TensorProto's `dtype`; INVALID_ARGUMENT (a 400 `ServingError`)
    naming `where` for a type this server does not read."""
    if proto.dtype not in _TYPES:
        name = types_pb2.DataType.Name(proto.dtype) if proto.dtype in types_pb2.DataType.values() else proto.dtype
        raise ServingError(f"{where}: tensors of type {name} are not supported")
    return np.dtype(_TYPES[proto.dtype][0])


def declared_shape(proto, where):
    """The shape a TensorProto declares, as a tuple of Python ints, read from the message
    alone: nothing of that size exists yet. INVALID_ARGUMENT for an unknown rank or a
    negative size."""
    if proto.tensor_shape.unknown_rank:
        raise ServingError(f"{where}: the tensor's shape has an unknown rank")
    shape = tuple(dim.size for dim in proto.tensor_shape.dim)
    if any(size < 0 for size in shape):
        raise ServingError(f"{where}: the tensor's shape {list(shape)} has a negative size")
    return shape


def to_array(proto, where, max_values=None):
    """The array a TensorProto holds; INVALID_ARGUMENT (a 400 `ServingError`) naming `where`
    for a type this server does not read, values that do not fit the shape, or (with
    `max_values`) a shape of more values than that, refused before any is made: a message
    of a few bytes may declare a shape of 10**12 values to be filled by repetition."""
    dtype = declared_dtype(proto, where)
    _, field, _ = _TYPES[proto.dtype]
    shape = declared_shape(proto, where)
    count = math.prod(shape)  # a Python int: dimensions of up to 2**63 - 1 each cannot overflow it
    if max_values is not None and count > max_values:
        raise ServingError(
            f"{where}: the shape {list(shape)} holds {count} values, more than this server accepts in one request "
            f"({max_values})"
        )
    if proto.tensor_content and dtype == np.object_:
        return np.array(_decoded_string_list(proto.tensor_content, count, where), dtype=object).reshape(shape)
    if proto.tensor_content:
        content = np.frombuffer(proto.tensor_content, dtype=dtype.newbyteorder("<"))
        if content.size != count:
            raise ServingError(f"{where}: tensor_content holds {content.size} values, the shape {list(shape)} {count}")
        return content.astype(dtype).reshape(shape)
    values = getattr(proto, field)
    if len(values) > count:
        raise ServingError(f"{where}: {len(values)} values for the shape {list(shape)} of {count}")
    if dtype == np.object_:
        array = np.empty(count, dtype=object)
        array[: len(values)] = list(values)
        array[len(values):] = values[-1] if values else b""
        return array.reshape(shape)
    if not len(values):
        return np.zeros(shape, dtype=dtype)
    values = np.array(values).astype(dtype)
    return np.pad(values, (0, count - len(values)), mode="edge").reshape(shape)


def _decoded_string_list(content, count, where):
    """The `count` strings of a string tensor's `tensor_content`, as TensorFlow encodes them
    (tensorflow/core/platform/tensor_coding.cc, EncodeStringList): each string's length as a
    varint, then the strings one after another."""
    lengths, position = [], 0
    for _ in range(count):
        length, shift = 0, 0
        while True:
            if position >= len(content) or shift > 28:
                raise ServingError(f"{where}: tensor_content does not hold {count} strings")
            byte = content[position]
            position += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        lengths.append(length)
    if position + sum(lengths) != len(content):
        raise ServingError(f"{where}: tensor_content does not hold {count} strings")
    strings = []
    for length in lengths:
        strings.append(bytes(content[position: position + length]))
        position += length
    return strings


def to_tensor_proto(array):
    """A TensorProto of `array` (values in the field of their type, as TF Serving writes them)."""
    array = np.asarray(array)
    if array.dtype.kind == "S":
        array = array.astype(object)
    enum = _ENUM_OF_DTYPE.get(array.dtype)
    if enum is None:
        raise ServingError(f"an output of type {array.dtype} cannot be written as a TensorProto", status=500)
    proto = tensor_pb2.TensorProto(dtype=enum)
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    _, field, _ = _TYPES[enum]
    flat = array.ravel()
    if array.dtype == np.object_:
        getattr(proto, field).extend(v if isinstance(v, bytes) else str(v).encode("utf-8") for v in flat)
    else:
        getattr(proto, field).extend(flat.tolist())
    return proto


def request_arrays(tensors, model_name, input_specs, limits=None):
    """A Predict request's tensors (`request.inputs`: name -> TensorProto) as arrays, checked
    against the signature's `input_specs` (name -> spec with dtype and shape) as TF Serving
    checks them: the same names, each of its declared type and shape. With `limits` (the
    server's `Limits`), rows, values and text lengths are bounded before any array of that
    size is made; without, only the types and shapes are checked (a warm-up file's requests,
    the operator's own)."""
    extra = sorted(set(tensors) - set(input_specs))
    missing = sorted(set(input_specs) - set(tensors))
    if extra or missing:
        raise ServingError(
            f"Request inputs do not match required inputs for model `{model_name}`. "
            f"Send extra: {{{','.join(extra)}}}. Missing but required: {{{','.join(missing)}}}."
        )
    return {
        name: _request_array(tensors[name], name, index, spec, limits)
        for index, (name, spec) in enumerate(sorted(input_specs.items()))
    }


def _request_array(proto, name, index, spec, limits):
    """One input tensor as an array: its declared type, shape and size checked against the
    signature and `limits` before any array of that size is made."""
    where = f'input "{name}"'
    dtype = declared_dtype(proto, where)
    if dtype != spec.dtype:
        raise ServingError(
            f'Expects arg[{index}] to be {dtype_name(spec.dtype)} but {dtype_name(dtype)} is provided ({where})'
        )
    shape = declared_shape(proto, where)
    fits = spec.shape is None or (len(shape) == len(spec.shape) and all(
        want is None or want == got for want, got in zip(spec.shape, shape)
    ))
    if not fits:
        want = "[" + ",".join("?" if d is None else str(d) for d in spec.shape) + "]"
        raise ServingError(f'input "{name}" has shape {list(shape)}, expected {want}')
    if limits is None:
        return to_array(proto, where)
    if shape:
        limits.check_rows(shape[0])
    array = to_array(proto, where, max_values=limits.max_values(spec.shape))
    if array.dtype == np.object_:
        # Characters, as REST counts them: of the bytes' UTF-8 reading (a byte that is not
        # UTF-8 counts as one).
        # A filled tensor repeats one object: each distinct value is measured once, and
        # only one of more bytes than the limit can have more characters.
        distinct = {id(value): value for value in array.ravel()}.values()
        longest = max((len(value.decode("utf-8", "replace")) for value in distinct
                       if len(value) > limits.max_text_length), default=0)
        limits.check_text(longest, f'in input "{name}"')
    return array
