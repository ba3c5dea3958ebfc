"""`tensorflow.TensorProto` <-> numpy arrays, as TF Serving reads and writes them over gRPC.

    array = to_array(request.inputs["inputs"], where='input "inputs"')   # np.ndarray
    proto = to_tensor_proto(np.array([b"Ein Mann."], dtype=object))     # string_val

Without TensorFlow (`tf.make_ndarray` would load its runtime into the server process;
protos.py says why not). The rules are `tensor_util.MakeNdarray`'s and `Tensor::FromProto`'s:
values come from `tensor_content` (little-endian bytes) or from the field of their type;
fewer values than the shape holds repeat the last one (a scalar-filled tensor), none gives
zeros; more is an error. Strings are bytes, as TensorFlow's.
"""

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


def to_array(proto, where):
    """The array a TensorProto holds; INVALID_ARGUMENT (a 400 `ServingError`) naming `where`
    for a type this server does not read or values that do not fit the shape."""
    if proto.dtype not in _TYPES:
        name = types_pb2.DataType.Name(proto.dtype) if proto.dtype in types_pb2.DataType.values() else proto.dtype
        raise ServingError(f"{where}: tensors of type {name} are not supported")
    dtype, field, _ = _TYPES[proto.dtype]
    if proto.tensor_shape.unknown_rank:
        raise ServingError(f"{where}: the tensor's shape has an unknown rank")
    shape = tuple(dim.size for dim in proto.tensor_shape.dim)
    if any(size < 0 for size in shape):
        raise ServingError(f"{where}: the tensor's shape {list(shape)} has a negative size")
    count = int(np.prod(shape, dtype=np.int64))
    if proto.tensor_content and dtype is not np.object_:
        content = np.frombuffer(proto.tensor_content, dtype=np.dtype(dtype).newbyteorder("<"))
        if content.size != count:
            raise ServingError(f"{where}: tensor_content holds {content.size} values, the shape {list(shape)} {count}")
        return content.astype(dtype).reshape(shape)
    values = list(getattr(proto, field))
    if len(values) > count:
        raise ServingError(f"{where}: {len(values)} values for the shape {list(shape)} of {count}")
    if dtype is np.object_:
        array = np.empty(count, dtype=object)
        array[:] = values + [values[-1] if values else b""] * (count - len(values))
        return array.reshape(shape)
    if not values:
        return np.zeros(shape, dtype=dtype)
    values = np.array(values).astype(dtype)
    return np.pad(values, (0, count - len(values)), mode="edge").reshape(shape)


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
