"""TensorFlow Serving's REST API in JSON: predict requests to a
signature's inputs, its outputs back.

The formats are TensorFlow Serving's (its `api_rest.md`): a predict
request names a `signature_name` (default `serving_default`) and gives its
inputs either in rows, `"instances"` (one value, or an object of named
values, per row), or in columns, `"inputs"` (one value, or an object of
named tensors). Its answer is `{"predictions": ...}` in rows or
`{"outputs": ...}` in columns; with one output, its name is left out.
Strings are JSON strings (UTF-8), or `{"b64": ...}` for bytes; an output
whose name ends in `_bytes` is given in base64.

One addition: in rows, an input the signature takes as a scalar (a
translation's `beam_width`, fill-mask's `top_k`) may be given in each row,
with one value for all rows (TensorFlow Serving would stack it and refuse
the shape).

Every mistake raises `RequestError` with the HTTP status TensorFlow
Serving answers and a one-line message.
"""

import base64
import json
import sys

import numpy as np
import tensorflow as tf

from keras_attn.decoding import MAX_BEAM_WIDTH
from keras_attn.models.bert import MAX_TOP_K

SERVING_DEFAULT = "serving_default"
# Inputs the exports take as counts, and their range: an export's
# graph would clip a value outside it.
COUNTS = {"beam_width": MAX_BEAM_WIDTH, "top_k": MAX_TOP_K}


class RequestError(ValueError):
    """A request the server refuses: `status` (400, 404, 413) and a one-line message.

    Args:
        message: str. The one-line message, the answer's `error`.
        status: int. The HTTP status of the answer. Defaults to 400.
    """

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


def parse_predict(body, max_instances):
    """The JSON body of a predict request → `(signature_name, rows, data)`.

    Args:
        body: bytes. The request's body, JSON in UTF-8.
        max_instances: int. The most rows a request may give.

    Returns:
        `(signature_name, rows, data)`: the signature's name (`"serving_default"` when the
        request names none), whether the inputs are in rows (True for `"instances"`, False for
        `"inputs"`), and the JSON value of those inputs.

    Raises:
        RequestError: when the body is not a JSON object in UTF-8, gives both or neither of
            `"instances"` and `"inputs"`, no rows, or a `signature_name` that is not a string
            (status 400); or more than `max_instances` rows (status 413).
    """
    try:
        request = json.loads(body)
    except UnicodeDecodeError:
        raise RequestError("JSON Parse error: the body is not UTF-8") from None
    except RecursionError:
        raise RequestError("JSON Parse error: arrays or objects nested too deeply") from None
    except ValueError as error:
        if "sys.set_int_max_str_digits" in str(error):  # Python's advice, not the client's
            raise RequestError(
                f"JSON Parse error: a number of more than {sys.get_int_max_str_digits()} digits"
            ) from None
        raise RequestError(f"JSON Parse error: {error}") from None
    if not isinstance(request, dict):
        raise RequestError("JSON Value: the request must be a JSON object")
    signature = request.get("signature_name", SERVING_DEFAULT)
    if not isinstance(signature, str):
        raise RequestError("'signature_name' must be a string")
    if ("instances" in request) == ("inputs" in request):
        raise RequestError(
            "Missing 'inputs' or 'instances' key"
            if "inputs" not in request
            else "Not both 'instances' and 'inputs' can be given"
        )
    rows = "instances" in request
    data = request["instances" if rows else "inputs"]
    if rows and not isinstance(data, list):
        raise RequestError("'instances' must be a list of rows")
    if rows and not data:
        raise RequestError("'instances' is empty: give at least one row")
    count = (
        len(data)
        if rows
        else max((len(v) for v in _columns(data) if isinstance(v, list)), default=1)
    )
    if count > max_instances:
        raise RequestError(f"{count} instances: at most {max_instances} per request", status=413)
    return signature, rows, data


def signature_inputs(function):
    """`{name: tf.TensorSpec}` of a loaded signature's inputs.

    Args:
        function: callable. A loaded signature (`loaded.signatures[name]`), or anything with
            its `structured_input_signature`.

    Returns:
        A dict of `tf.TensorSpec`, by input name.
    """
    return dict(function.structured_input_signature[1])


def to_inputs(function, rows, data):
    """The request's `data` as `{input name: np.ndarray}` for `function` (a loaded signature).

    Args:
        function: callable. The loaded signature the request names.
        rows: bool. Whether `data` is in rows (`"instances"`) rather than in columns
            (`"inputs"`), as `parse_predict` says.
        data: list, dict or JSON scalar. The value of the request's `"instances"` or
            `"inputs"`.

    Returns:
        `(inputs, batch)`: `batch` the number of rows (inputs whose
        signature shape has a first, batch axis), or None when none has.

    Raises:
        RequestError: when the inputs are unknown or missing, of another type or shape than
            the signature's, a count (`beam_width`, `top_k`) out of its range, or of
            different batch sizes (status 400).
    """
    specs = signature_inputs(function)
    if rows:
        columns = _rows_to_columns(specs, data)
    elif isinstance(data, dict) and (len(specs) > 1 or set(data) == set(specs)):
        columns = data
    elif len(specs) == 1:
        columns = {next(iter(specs)): data}
    else:
        raise RequestError(f"'inputs' must name the signature's inputs: {', '.join(sorted(specs))}")
    unknown = sorted(set(columns) - set(specs))
    missing = sorted(set(specs) - set(columns))
    if unknown or missing:
        raise RequestError(
            "; ".join(
                [f"unknown input(s) {', '.join(unknown)}"] * bool(unknown)
                + [f"missing input(s) {', '.join(missing)}"] * bool(missing)
            )
            + f" (the signature takes {', '.join(sorted(specs))})"
        )
    inputs = {name: _tensor(name, columns[name], specs[name]) for name in specs}
    for name, most in COUNTS.items():
        if name in inputs and np.any((inputs[name] < 1) | (inputs[name] > most)):
            raise RequestError(f"{name}: {inputs[name].tolist()}, where 1 to {most} belongs")
    batches = {len(inputs[name]) for name, spec in specs.items() if spec.shape.rank}
    if len(batches) > 1:
        raise RequestError(f"inputs of different batch sizes: {sorted(batches)}")
    return inputs, next(iter(batches), None)


def to_response(outputs, rows):
    """`{output name: np.ndarray}` → TensorFlow Serving's JSON answer (a dict).

    Args:
        outputs: dict. `{output name: np.ndarray}`, a signature's outputs.
        rows: bool. Whether the request was in rows (answered as `"predictions"`) rather than
            in columns (`"outputs"`).

    Returns:
        A dict, JSON-able: strings decoded from UTF-8, an output whose name ends in `_bytes`
        in base64.
    """
    values = {name: _json_value(name, value) for name, value in sorted(outputs.items())}
    if not rows:
        return {"outputs": next(iter(values.values())) if len(values) == 1 else values}
    if len(values) == 1:
        return {"predictions": next(iter(values.values()))}
    count = len(next(iter(values.values())))
    return {
        "predictions": [
            {name: value[row] for name, value in values.items()} for row in range(count)
        ]
    }


def describe_signature(function):
    """A loaded signature as TensorFlow Serving's metadata describes a `SignatureDef`.

    Args:
        function: callable. A loaded signature (its input signature and outputs).

    Returns:
        A dict of its `"inputs"` and `"outputs"` (dtype, shape and name of each) and its
        `"method_name"`.
    """
    from tensorflow.core.framework import types_pb2

    def tensor(name, dtype, shape):
        dims = (
            []
            if shape.rank is None
            else [{"size": str(-1 if d is None else d), "name": ""} for d in shape]
        )
        return {
            "dtype": types_pb2.DataType.Name(dtype.as_datatype_enum),
            "tensor_shape": {"dim": dims, "unknown_rank": shape.rank is None},
            "name": f"{name}:0",
        }

    outputs = function.structured_outputs
    return {
        "inputs": {
            name: tensor(name, spec.dtype, spec.shape)
            for name, spec in signature_inputs(function).items()
        },
        "outputs": {name: tensor(name, out.dtype, out.shape) for name, out in outputs.items()},
        "method_name": "tensorflow/serving/predict",
    }


def _columns(data):
    return data.values() if isinstance(data, dict) else [data]


def _rows_to_columns(specs, instances):
    if len(specs) == 1 and not (
        instances and all(isinstance(row, dict) and set(row) == set(specs) for row in instances)
    ):
        return {next(iter(specs)): instances}
    columns = {}
    for index, row in enumerate(instances):
        if not isinstance(row, dict) or "b64" in row:
            raise RequestError(
                f"instance {index}: the signature takes several inputs "
                f"({', '.join(sorted(specs))}): each instance must be an object of them"
            )
        if set(row) != set(instances[0]):
            raise RequestError(
                f"instance {index} gives {', '.join(sorted(row)) or 'no input'} where instance 0 "
                f"gives {', '.join(sorted(instances[0]))}: every instance must give the same inputs"
            )
        for name, value in row.items():
            columns.setdefault(name, []).append(value)
    for name, spec in specs.items():
        values = columns.get(name)
        if values is not None and spec.shape.rank == 0:  # one value for every row
            if any(value != values[0] for value in values):
                raise RequestError(f"{name}: a scalar input; give every instance the same value")
            columns[name] = values[0]
    return columns


def _tensor(name, value, spec):
    dtype = spec.dtype
    try:
        if dtype == tf.string:
            array = np.array(_strings(value), dtype=object)
        elif dtype.is_bool:
            array = _typed(value, bool, np.bool_)
        elif dtype.is_integer:
            array = _typed(value, int, dtype.as_numpy_dtype)
        elif dtype.is_floating:
            array = _typed(value, (int, float), dtype.as_numpy_dtype)
        else:
            raise RequestError(f"{name}: inputs of type {dtype.name} are not supported")
    except (TypeError, ValueError, OverflowError) as error:
        raise RequestError(f"{name}: expected {dtype.name} values: {error}") from None
    if not spec.shape.is_compatible_with(array.shape):
        raise RequestError(f"{name}: expected shape {_shape(spec.shape)}, got {list(array.shape)}")
    return array


def _strings(value):
    if isinstance(value, list):
        return [_strings(item) for item in value]
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except ValueError:
            raise ValueError('invalid base64 in a {"b64": ...} value') from None
    raise TypeError(f"{type(value).__name__} {json.dumps(value)[:40]} is not a string")


def _typed(value, python_types, numpy_dtype):
    def check(item):
        if isinstance(item, list):
            return [check(i) for i in item]
        if isinstance(item, bool) != (python_types is bool) or not isinstance(item, python_types):
            raise TypeError(f"{type(item).__name__} {json.dumps(item)[:40]}")
        return item

    return np.array(check(value), dtype=numpy_dtype)


def _shape(shape):
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _json_value(name, array):
    array = np.asarray(array)
    if array.dtype == object:
        if name.endswith("_bytes"):
            return _nested(array, lambda b: {"b64": base64.b64encode(b).decode("ascii")})
        return _nested(array, lambda b: b.decode("utf-8", "replace"))
    return array.tolist()  # floats may be NaN or Infinity, which TensorFlow Serving's JSON allows


def _nested(value, convert):
    if not isinstance(value, np.ndarray):
        return convert(value)
    return [_nested(item, convert) for item in value] if value.ndim else convert(value.item())
