"""`keras-attn serve`: every export under a model root behind TensorFlow Serving's REST API.

    GET  /                                                the explorer page (texts, attention)
    GET  /v1/models/{name}[/versions/{version}]           version status
    GET  /v1/models/{name}[/versions/{version}]/metadata  signatures, dtypes, shapes
    POST /v1/models/{name}[/versions/{version}]:predict   {"signature_name", "instances" | "inputs"}

The answers, status codes and `{"error": ...}` bodies are TensorFlow
Serving's (`keras_attn.serving.rest`), so a client of one works with the
other. A Starlette application run by uvicorn; model calls run in a thread
pool, off the event loop, merged by `DynamicBatcher` where a signature
allows it (string rows in, outputs of fixed shape per row out), each with
requests of about its length; a translation of one text runs compiled by XLA
once its program is (`CompiledRoutes`). New versions under the root are found
every `poll_seconds`. Any other path or method gets a JSON error too.
"""

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import os
import re
import signal
import socket

import h11
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from uvicorn.protocols.http.h11_impl import H11Protocol

from keras_attn.errors import UserError
from keras_attn.serving import rest
from keras_attn.serving.batching import DynamicBatcher
from keras_attn.serving.compiled_routes import CompiledRoutes
from keras_attn.serving.store import AVAILABLE, ModelStore, NotFound, load_version
from keras_attn.serving.versions import is_ctranslate2_folder, is_saved_model_folder

EXPLORER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "explorer")  # the page at GET /
# The page runs only its own script and style, and talks only to this server.
PAGE_POLICY = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
# /v1/models/{name}[/versions/{version}][/metadata | :predict]
MODEL_PATH = re.compile(
    r"(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?(?P<verb>/metadata|:predict)?"
)


def json_response(content, status=200):
    """JSON as TensorFlow Serving writes it: UTF-8, NaN and Infinity allowed.

    Args:
        content: dict or list. The JSON-able answer.
        status: int. The HTTP status. Defaults to 200.

    Returns:
        A `starlette.responses.Response` of media type `application/json`.
    """
    body = json.dumps(content, ensure_ascii=False, allow_nan=True).encode("utf-8")
    return Response(body, status_code=status, media_type="application/json")


def error_response(message, status):
    """An error as TensorFlow Serving answers it: `{"error": message}`.

    Args:
        message: str. The one-line message.
        status: int. The HTTP status.

    Returns:
        A `starlette.responses.Response` of media type `application/json`.
    """
    return json_response({"error": message}, status)


def serve(settings, log=print):
    """Runs the server of `settings` until SIGINT or SIGTERM; returns 0.

    On either signal it stops taking connections, answers the requests in
    flight and returns (uvicorn's graceful shutdown).

    Args:
        settings: `keras_attn.config.ServeConfig`. The model root, address, batching and
            limits.
        log: callable. Told, once the first scan is done, which versions loaded, and when a
            version's beam widths are compiled; each line ends with the address served.
            Defaults to `print`.

    Returns:
        An int: 0, the exit status.

    Raises:
        UserError: when the model root is not a folder, or is one export's version rather
            than a root of exports, or the server cannot listen at the host and port.
    """
    import uvicorn

    root = settings.model_root
    if not os.path.isdir(root):
        what = "a file, not a folder" if os.path.exists(root) else "no such folder"
        raise UserError(f"{root}: {what} (the exports to serve, <name>/<version>/)")
    if is_saved_model_folder(root) or is_ctranslate2_folder(root):
        raise UserError(
            f"{root}: one export's version, not a root of exports (<name>/<version>/): give the "
            "folder two levels above it"
        )
    # before the models load: a taken port is said at once
    listening = _listen(settings.host, settings.port)
    address = f"http://{settings.host}:{listening.getsockname()[1]}"
    app = create_app(
        settings, log=lambda line: log(f"{line}; serving on {address}/v1/models/<name>")
    )
    config = uvicorn.Config(
        app, http=JsonBadRequests, log_level="warning", timeout_graceful_shutdown=60
    )
    server = uvicorn.Server(config)
    # uvicorn stops gracefully on SIGTERM, then raises it again; that second one ends a clean stop.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run(sockets=[listening])
    finally:
        signal.signal(signal.SIGTERM, previous)
        listening.close()
    return 0


class JsonBadRequests(H11Protocol):
    """uvicorn's HTTP/1.1, with its 400 for a request it cannot parse (a bad Content-Length, a
    broken header line) in JSON, as every other answer, where uvicorn answers in plain text.

    Takes the arguments of uvicorn's `H11Protocol`, which uvicorn gives it when it is the
    server's protocol (`uvicorn.Config(app, http=JsonBadRequests)`).
    """

    def send_400_response(self, msg):
        answer = error_response(msg, 400)
        headers = [*answer.raw_headers, (b"connection", b"close")]
        for event in (
            h11.Response(status_code=answer.status_code, headers=headers),
            h11.Data(data=answer.body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()


def _listen(host, port):
    """A socket listening on `host:port` (port 0: one the system
    picks), or the reason in one line.
    """
    listening = None
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's own
        listening.bind(address)
        listening.listen()
        return listening
    except OSError as error:  # socket.gaierror included: a host name that does not resolve
        if listening is not None:
            listening.close()
        raise UserError(f"{host}:{port}: cannot listen there ({error.strerror or error})") from None


def create_app(settings, store=None, log=None):
    """The ASGI application serving `settings.model_root`, or a given `ModelStore`.

    Args:
        settings: `keras_attn.config.ServeConfig`. The model root, batching, limits, threads
            and compiled widths.
        store: `ModelStore` or `None`. The store to serve. Defaults to `None`: a new one of
            `settings.model_root`.
        log: callable or `None`. Told which versions loaded once the first scan is done, and
            when each version's widths are compiled. Defaults to `None` (nothing told).

    Returns:
        A `starlette.applications.Starlette` application; its `state` holds the `store`, the
        `batcher` and the compiled `routes`.
    """
    store = store or ModelStore(
        settings.model_root, load=functools.partial(load_version, concurrent_calls=settings.threads)
    )
    executor = concurrent.futures.ThreadPoolExecutor(settings.threads, thread_name_prefix="model")
    routes = CompiledRoutes(settings.compiled_widths, log=log)
    batcher = DynamicBatcher(
        _run_signature(store, routes),
        executor,
        settings.max_batch_size,
        settings.batch_timeout_ms,
        workers=settings.threads,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(executor, store.refresh)
        if log:
            log(_loaded_line(settings.model_root, found, store.skipped))
        routes.start(found)
        poller = (
            loop.create_task(_poll(store, routes, executor, settings.poll_seconds))
            if settings.poll_seconds
            else None
        )
        yield
        if poller:
            poller.cancel()
        executor.shutdown(wait=True)

    async def models(request):
        match = MODEL_PATH.fullmatch(request.path_params.get("rest", ""))
        if match is None:
            return error_response(f"Malformed request: {request.method} {request.url.path}", 404)
        name, version, verb = match["name"], match["version"], match["verb"]
        if version is not None and not re.fullmatch(r"\d{1,18}", version):
            return error_response(f"Failed to convert version: {version}", 400)
        version = None if version is None else int(version)
        expected = "POST" if verb == ":predict" else "GET"
        if request.method.replace("HEAD", "GET") != expected:  # HEAD: GET's answer without its body
            return error_response(f"Malformed request: {request.method} {request.url.path}", 405)
        try:
            if verb is None:
                return json_response(_status(store, name, version))
            found = store.find(name, version)
            if verb == "/metadata":
                return json_response(_metadata(found))
            return await _predict(request, found, batcher, executor, settings)
        except NotFound as error:
            return error_response(str(error), 404)
        except rest.RequestError as error:
            return error_response(str(error), error.status)
        except Exception as error:  # noqa: BLE001  (the model's own error, in TensorFlow Serving's body)
            return _model_error(error)

    async def page(request):
        return FileResponse(
            os.path.join(EXPLORER, "index.html"), headers={"Content-Security-Policy": PAGE_POLICY}
        )

    async def explorer_models(request):
        return json_response(_available(store))

    app = Starlette(
        routes=[
            Route("/", page),
            Route("/explorer/models", explorer_models),
            Mount("/explorer", StaticFiles(directory=EXPLORER)),
            Route("/v1/models/{rest:path}", models, methods=["GET", "POST"]),
            Route("/v1/models", models, methods=["GET", "POST"]),  # rest "": malformed, 404
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error},
    )
    app.router.redirect_slashes = False  # TensorFlow Serving's paths are exact: no 307 to others
    app.state.store, app.state.batcher, app.state.routes = store, batcher, routes
    return app


async def _http_error(request, error):
    """Starlette's own refusals (no such route or file, a method a route lacks) as JSON errors."""
    return error_response(f"{error.detail}: {request.method} {request.url.path}", error.status_code)


def _model_error(error):
    """A model call's failure: 400 for TensorFlow's invalid-argument
    errors (as TensorFlow Serving), else 500.
    """
    import tensorflow as tf

    lines = (
        (getattr(error, "message", None) or str(error) or type(error).__name__).strip().splitlines()
    )
    status = 400 if isinstance(error, tf.errors.InvalidArgumentError) else 500
    # A graph's failed assertion: its own line, not the "Graph execution error:" above it.
    return error_response(
        next((line for line in lines if line.startswith("assertion failed:")), lines[0]), status
    )


def _available(store):
    """The explorer's model list: each model's newest available version and its signatures."""
    listed = []
    for name in store.names():
        try:
            found = store.find(name)
        except NotFound:
            continue
        listed.append(
            {"name": name, "version": found.number, "signatures": sorted(found.loaded.signatures)}
        )
    return listed


def _loaded_line(root, versions, skipped=()):
    loaded = [f"{v.name}/{v.number}" for v in versions if v.state == AVAILABLE]
    failed = [f"{v.name}/{v.number} ({v.error})" for v in versions if v.state != AVAILABLE]
    # a folder's name as Python writes a string: its control characters escaped, never run
    unnamed = ", ".join(repr(name) for name in sorted(skipped))
    return (
        f"{root}: {len(loaded)} version(s) loaded"
        + (f": {', '.join(loaded)}" if loaded else "")
        + (f"; failed to load: {'; '.join(failed)}" if failed else "")
        + (
            f"; skipped {unnamed}: not model names (letters, digits, '.', '_', '-')"
            if unnamed
            else ""
        )
    )


async def _poll(store, routes, executor, seconds):
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(seconds)
        routes.start(await loop.run_in_executor(executor, store.refresh))


def _status(store, name, version):
    versions = store.versions(name)
    if version is not None:
        versions = [v for v in versions if v.number == version]
        if not versions:
            raise NotFound(f"Servable not found for request: Specific({name}, {version})")
    return {
        "model_version_status": [
            {
                "version": str(v.number),
                "state": v.state,
                "status": {
                    "error_code": "OK" if v.state != "END" else "UNKNOWN",
                    "error_message": v.error,
                },
            }
            for v in reversed(versions)
        ]
    }


def _metadata(found):
    signatures = found.loaded.signatures
    return {
        "model_spec": {"name": found.name, "signature_name": "", "version": str(found.number)},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    name: rest.describe_signature(signatures[name]) for name in sorted(signatures)
                }
            }
        },
    }


async def _read_body(request, limit):
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise rest.RequestError(
            f"the request body has {declared} bytes: at most {limit}", status=413
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise rest.RequestError(f"the request body is over {limit} bytes", status=413)
    return bytes(body)


async def _predict(request, found, batcher, executor, settings):
    try:
        body = await _read_body(request, settings.max_request_bytes)
    except ClientDisconnect:
        return Response(status_code=499)  # nobody to answer; nothing was run
    signature_name, rows, data = rest.parse_predict(body, settings.max_instances)
    function = found.loaded.signatures.get(signature_name)
    if function is None:
        raise NotFound(f'Serving signature name: "{signature_name}" not found in signature def')
    inputs, batch = rest.to_inputs(function, rows, data)
    scalars = tuple(
        sorted((name, value.item()) for name, value in inputs.items() if value.ndim == 0)
    )
    key = (found.name, found.number, signature_name, scalars, _length_bucket(inputs))
    if batch and settings.max_batch_size > 1 and _batchable(function):
        outputs = await batcher(key, inputs, batch)
    else:
        outputs = await asyncio.get_running_loop().run_in_executor(
            executor, batcher.run, key, inputs
        )
    return json_response(rest.to_response(outputs, rows))


def _length_bucket(inputs):
    """The power of two above the longest text of the request, in bytes: requests batch only with
    others of about their length, so one long input does not hold a batch of short ones (a merged
    batch decodes until its longest row ends)."""
    texts = [value for value in inputs.values() if value.dtype == object and value.ndim == 1]
    return max((len(text) for column in texts for text in column), default=0).bit_length()


def _batchable(function):
    """Rows of strings or numbers in, and every output of one fixed
    shape per row: rows merge and split exactly.
    """
    inputs_ok = all(
        spec.shape.rank is not None and spec.shape.rank <= 1
        for spec in rest.signature_inputs(function).values()
    )
    outputs_ok = all(
        out.shape.rank and out.shape[1:].is_fully_defined()
        for out in function.structured_outputs.values()
    )
    return inputs_ok and outputs_ok


def _run_signature(store, routes):
    def run(key, inputs):
        import tensorflow as tf

        name, number, signature_name = key[:3]
        found = store.find(name, number)
        function = found.loaded.signatures[routes.signature(found, signature_name, inputs)]
        specs = rest.signature_inputs(function)
        outputs = function(
            **{name: tf.constant(value, specs[name].dtype) for name, value in inputs.items()}
        )
        return {name: value.numpy() for name, value in outputs.items()}

    return run
