"""bert4keras's ``WebServing``: expose Python functions as a small JSON web API, served by
waitress (a maintained, pure-Python production WSGI server; bert4keras used bottle).

    arguments = {'text': (None, True), 'n': (int, False)}
    web = WebServing(port=8864)
    web.route('/gen_synonyms', gen_synonyms, arguments)
    web.start()        # then GET http://127.0.0.1:8864/gen_synonyms?text=...&n=5

Every answer is JSON ``{"code": ..., "desc": ..., "data": ...}``: code 0 with the function's
result as data (numpy scalars and arrays as numbers and lists); 1 when a required argument is
missing or cannot be converted, or when the request itself is refused (then with an HTTP error
status: 400 malformed, 404/405 no such route, 413 body over ``max_body``, 415 a content type
other than a form or JSON); 2 when the function raised or its result is not JSON (desc: the
message; the traceback goes to the ``gau_keras.serving`` logger, never to the client).

Calls of the functions are serialised (models are not safe to call from several threads at
once). It listens on 127.0.0.1 unless told otherwise; ``host='0.0.0.0'`` exposes it on every
interface, **without authentication**: put it behind a proxy that authenticates before that.
"""

import email.parser
import email.policy
import json
import logging
import socket
import threading
import time
import urllib.parse
import warnings

import numpy as np

LOG = logging.getLogger("gau_keras.serving")

#: the default request-body limit (bytes)
MAX_BODY = 4 * 2**20
#: after refusing a request (e.g. a body over the limit, refused from its Content-Length before it is read), what the
#: client still sends is read and thrown away, up to these many bytes and seconds, so that it sees the answer and
#: not a connection reset while it is sending; a client silent for ``channel_timeout`` is closed sooner
DRAIN_BYTES, DRAIN_SECONDS = 2**28, 10
_METHODS = ("GET", "POST")
_FORM = "application/x-www-form-urlencoded"
_BOTTLE_SERVERS = ("paste", "waitress", "auto")


class WebServing:
    """A JSON web API over functions.

    Args:
        host, port: where to listen (``port=0``: a free port, then in ``port``).
        server: bert4keras's bottle server name; waitress always serves (another name
            than 'paste', 'waitress' or 'auto' is warned about).
        max_body: the largest request body read, in bytes (413 above it).
        threads: waitress's worker threads (the functions themselves run one at a time).
        channel_timeout: seconds a connection may stay silent (a slow or stalled client)
            before it is closed.
        connection_limit, backlog: the most connections served at once, and queued.
    """

    def __init__(
        self,
        host="127.0.0.1",
        port=8000,
        server="paste",
        max_body=MAX_BODY,
        threads=4,
        channel_timeout=30,
        connection_limit=100,
        backlog=1024,
    ):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f"WebServing: port must be an integer in [0, 65535], got {port!r}")
        for name, value in (
            ("max_body", max_body),
            ("threads", threads),
            ("connection_limit", connection_limit),
            ("backlog", backlog),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"WebServing: {name} must be a positive integer, got {value!r}")
        if not isinstance(channel_timeout, int) or isinstance(channel_timeout, bool) or channel_timeout < 1:
            raise ValueError(
                f"WebServing: channel_timeout must be a whole number of seconds >= 1, got {channel_timeout!r}"
            )
        if server not in _BOTTLE_SERVERS:
            warnings.warn(
                f"WebServing: server={server!r} names a bottle server; gau_keras serves with "
                f"waitress whatever the name",
                stacklevel=2,
            )
        self.host, self.port, self.server = host, port, server
        self.max_body, self.threads, self.channel_timeout = max_body, threads, channel_timeout
        self.connection_limit, self.backlog = connection_limit, backlog
        self.routes = {}
        self.httpd = None
        self.started = threading.Event()
        self._lock = threading.Lock()
        self._stop_lock = threading.Lock()

    def wraps(self, func, arguments, method="GET"):
        """``func`` as a handler: a mapping of the request's fields -> JSON text.

        Args:
            func: called with the declared arguments as keywords.
            arguments: {name: (converter or None, required)}; the converter (e.g. int)
                turns the field's value (text, or a JSON value) into the argument.
            method: 'GET' (fields from the query string) or 'POST' (from a form or JSON body).
        """

        def handler(fields):
            kwargs = {}
            for name, (convert, required) in arguments.items():
                value = fields.get(name)
                if value is None:
                    if required:
                        return _answer(1, f'lack of "{name}" argument')
                    continue
                try:
                    kwargs[name] = value if convert is None else convert(value)
                except Exception as e:
                    return _answer(1, f'invalid "{name}" argument: {e}')
            try:
                with self._lock:
                    result = func(**kwargs)
            except Exception as e:
                LOG.exception("WebServing: %s raised", getattr(func, "__name__", func))
                return _answer(2, str(e))
            try:
                return _answer(0, "succeeded", result)
            except (TypeError, ValueError) as e:
                LOG.exception("WebServing: the result of %s is not JSON", getattr(func, "__name__", func))
                return _answer(2, f"the result is not JSON-serialisable: {e}")

        return handler

    def route(self, path, func, arguments, method="GET"):
        """Serves ``func`` at ``path`` for ``method`` ('GET' or 'POST'); see ``wraps``."""
        method = method.upper()
        if method not in _METHODS:
            raise ValueError(f"WebServing.route: method must be 'GET' or 'POST', got {method!r}")
        self.routes[method, path] = self.wraps(func, arguments, method)

    def start(self):
        """Listens and serves until interrupted (Ctrl-C) or ``stop()``."""
        from waitress import create_server

        self.httpd = create_server(
            _Application(self.routes, self.max_body),
            host=self.host,
            port=self.port,
            threads=self.threads,
            channel_timeout=self.channel_timeout,
            connection_limit=self.connection_limit,
            backlog=self.backlog,
            cleanup_interval=max(1, int(self.channel_timeout // 2)),  # when idle channels are looked at
            # waitress refuses a body of this size or more, from its Content-Length before reading it
            max_request_body_size=self.max_body + 1,
            expose_tracebacks=False,
            ident="gau_keras",
            asyncore_loop_timeout=0.2,
        )
        _answer_errors_in_json(self.httpd)
        self.port = int(getattr(self.httpd, "effective_port", None) or self.httpd.effective_listen[0][1])
        httpd = self.httpd
        self.started.set()
        try:
            httpd.run()
        except KeyboardInterrupt:
            pass
        finally:
            with self._stop_lock:
                self.httpd = None
            for channel in list(httpd._map.values()):  # the listening socket too (Ctrl-C left it open)
                channel.close()
            httpd.task_dispatcher.shutdown(timeout=5)

    def stop(self):
        """Stops a server started (in another thread) by ``start``; once (later calls do nothing)."""
        with self._stop_lock:
            httpd, self.httpd = self.httpd, None
        if httpd is not None and not httpd.trigger._closed:
            # asyncore is single-threaded: the serving loop closes its own sockets when woken
            httpd.trigger.pull_trigger(lambda: [channel.close() for channel in list(httpd._map.values())])


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} {value!r:.80} is not JSON-serialisable")


def _answer(code, desc, data=None):
    return json.dumps(
        {"code": code, "desc": desc, "data": {} if data is None else data},
        ensure_ascii=False,
        allow_nan=False,
        default=_jsonable,
    )


class _Refused(Exception):
    """A request answered with an HTTP error status and a JSON ``desc``."""

    def __init__(self, status, desc):
        super().__init__(desc)
        self.status, self.desc = status, desc


class _Application:
    """The WSGI application: routing, body reading and the answers."""

    def __init__(self, routes, max_body):
        self.routes, self.max_body = routes, max_body

    def __call__(self, environ, start_response):
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "")
        try:
            status, text = "200 OK", self._serve(environ, method, path)
        except _Refused as refused:
            status, text = refused.status, _answer(1, refused.desc)
        except Exception:  # a bug of ours: logged, answered without the details
            LOG.exception("WebServing: %s %s failed", method, path)
            status, text = "500 Internal Server Error", _answer(2, "internal error (logged on the server)")
        body = text.encode("utf-8")
        start_response(
            status, [("Content-Type", "application/json; charset=utf-8"), ("Content-Length", str(len(body)))]
        )
        return [body]

    def _serve(self, environ, method, path):
        handler = self.routes.get((method, path))
        if handler is None:
            if any((m, path) in self.routes for m in _METHODS):
                raise _Refused("405 Method Not Allowed", f"{path} does not take {method}")
            raise _Refused("404 Not Found", f"no route {path}")
        if method == "GET":
            return handler(_query_fields(environ.get("QUERY_STRING", "")))
        return handler(_body_fields(environ.get("CONTENT_TYPE", ""), self._body(environ)))

    def _body(self, environ):
        length = environ.get("CONTENT_LENGTH") or ""
        if length:
            if not length.isdigit():
                raise _Refused("400 Bad Request", f"invalid Content-Length {length!r}")
            if int(length) > self.max_body:
                raise _Refused(
                    "413 Request Entity Too Large",
                    f"the body of {int(length)} bytes is over the limit of {self.max_body} bytes",
                )
        body = environ["wsgi.input"].read(self.max_body + 1)
        if len(body) > self.max_body:
            raise _Refused("413 Request Entity Too Large", f"the body is over the limit of {self.max_body} bytes")
        return body


def _last_values(pairs):
    """{name: last value} (a repeated field counts by its last value, as in bottle)."""
    return {name: value for name, value in pairs}


def _decoded(data, charset, what):
    try:
        return data.decode(charset)
    except LookupError:
        raise _Refused("400 Bad Request", f"{what}: unknown charset {charset!r}") from None
    except UnicodeDecodeError as e:
        raise _Refused("400 Bad Request", f"{what} is not valid {charset}: {e.reason} at byte {e.start}") from None


def _query_fields(query):
    try:
        return _last_values(urllib.parse.parse_qsl(query, keep_blank_values=True, errors="strict"))
    except UnicodeDecodeError as e:
        raise _Refused("400 Bad Request", f"the query string is not valid UTF-8: {e.reason}") from None


def _body_fields(content_type, body):
    """The fields of a POST body: urlencoded, multipart (file parts skipped) or a JSON object."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "multipart/form-data":
        return _multipart_fields(content_type, body)
    if kind == "application/json":
        try:
            fields = json.loads(_decoded(body, "utf-8", "the JSON body"), parse_constant=_no_constant)
        except ValueError as e:
            raise _Refused("400 Bad Request", f"the JSON body does not parse: {e}") from None
        if not isinstance(fields, dict):
            raise _Refused("400 Bad Request", f"the JSON body must be an object, got {type(fields).__name__}")
        return fields
    if kind in (_FORM, ""):
        return _last_values(urllib.parse.parse_qsl(_decoded(body, "utf-8", "the form body"), keep_blank_values=True))
    raise _Refused(
        "415 Unsupported Media Type", f"content type {kind!r}: send {_FORM}, multipart/form-data or application/json"
    )


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _multipart_fields(content_type, body):
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise _Refused("400 Bad Request", "a multipart/form-data body without a valid boundary")
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name is not None and part.get_filename() is None:
            # browsers send UTF-8 parts without a charset (email's default would be ASCII)
            fields[name] = _decoded(
                part.get_payload(decode=True) or b"", part.get_content_charset() or "utf-8", f"form field {name!r}"
            )
    return fields


def _answer_errors_in_json(httpd):
    """waitress answers what it refuses itself (a malformed Content-Length, a body over the
    limit) in text, then closes the connection; these servers answer it in the same JSON as the
    rest, then half-close and drain the connection (``DRAIN_BYTES``, ``DRAIN_SECONDS``)."""
    from waitress.channel import HTTPChannel
    from waitress.server import BaseWSGIServer
    from waitress.task import ErrorTask

    class JsonErrorTask(ErrorTask):
        def execute(self):
            error = self.request.error
            desc = (
                f"the body is over the limit of {self.channel.adj.max_request_body_size - 1} bytes"
                if error.code == 413
                else f"{error.reason}: {error.body}"
            )
            body = _answer(1, desc).encode("utf-8")
            self.status = f"{error.code} {error.reason}"
            self.response_headers.extend(
                [
                    ("Content-Type", "application/json; charset=utf-8"),
                    ("Content-Length", str(len(body))),
                    ("Connection", "close"),
                ]
            )
            self.set_close_on_finish()
            self.content_length = len(body)
            self.write(body)
            self.channel.refused = True

    class JsonChannel(HTTPChannel):
        error_task_class = JsonErrorTask
        refused, drain_until, drained = False, None, 0

        def handle_close(self):
            """Once a refusal is sent: half-closes, then reads on (closing at once would reset
            the connection under a client still sending, which may then never read the answer)."""
            if self.refused and self.drain_until is None and self.connected and not self.total_outbufs_len:
                try:
                    self.socket.shutdown(socket.SHUT_WR)
                    self.drain_until, self.will_close = time.monotonic() + DRAIN_SECONDS, False
                    return
                except OSError:
                    pass
            super().handle_close()

        def handle_read(self):
            if self.drain_until is None:
                return super().handle_read()
            try:
                data = self.socket.recv(2**18)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            self.drained, self.last_activity = self.drained + len(data), time.time()  # silence: channel_timeout
            if not data or self.drained > DRAIN_BYTES or time.monotonic() > self.drain_until:
                super().handle_close()

    for server in [httpd, *getattr(httpd, "map", {}).values()]:
        if isinstance(server, BaseWSGIServer):
            server.channel_class = JsonChannel
