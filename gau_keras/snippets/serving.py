"""bert4keras's ``WebServing``: expose Python functions as a small JSON web API,
on the standard library's HTTP server (bert4keras used bottle).

    arguments = {'text': (None, True), 'n': (int, False)}
    web = WebServing(port=8864)
    web.route('/gen_synonyms', gen_synonyms, arguments)
    web.start()        # then GET http://127.0.0.1:8864/gen_synonyms?text=...&n=5

Every answer is JSON ``{"code": ..., "desc": ..., "data": ...}``: code 0 with
the function's result as data; 1 when a required argument is missing (or, here,
cannot be converted); 2 when the function raised (desc: its message). Calls
are served one at a time (models are not safe to call from several threads at
once). For trying a model out, not for production traffic.
"""
import email.parser
import email.policy
import http.server
import json
import threading
import urllib.parse

_METHODS = ("GET", "POST")


class WebServing:
    """A JSON web API over functions.

    Args:
        host, port: where to listen (``port=0``: a free port, then in ``port``).
        server: bert4keras's bottle server name; accepted and ignored (the
            standard library's threading HTTP server is always used).
    """

    def __init__(self, host="0.0.0.0", port=8000, server="paste"):
        self.host = host
        self.port = port
        self.server = server
        self.routes = {}
        self.httpd = None
        self.started = threading.Event()
        self._lock = threading.Lock()

    def wraps(self, func, arguments, method="GET"):
        """``func`` as a handler: a mapping of the request's fields (str -> str) -> JSON text.

        Args:
            func: called with the declared arguments as keywords; its result
                must be JSON-serialisable.
            arguments: {name: (converter or None, required)}; the converter
                (e.g. int) turns the field's text into the value.
            method: 'GET' (fields from the query string) or 'POST' (from the form body).
        """
        def handler(fields):
            answer = {"code": 0, "desc": "succeeded", "data": {}}
            kwargs = {}
            for name, (convert, required) in arguments.items():
                value = fields.get(name)
                if value is None:
                    if required:
                        answer.update(code=1, desc=f'lack of "{name}" argument')
                        return json.dumps(answer, ensure_ascii=False)
                    continue
                try:
                    kwargs[name] = value if convert is None else convert(value)
                except Exception as e:
                    answer.update(code=1, desc=f'invalid "{name}" argument: {e}')
                    return json.dumps(answer, ensure_ascii=False)
            try:
                with self._lock:
                    answer["data"] = func(**kwargs)
            except Exception as e:
                answer.update(code=2, desc=str(e))
            return json.dumps(answer, ensure_ascii=False)

        return handler

    def route(self, path, func, arguments, method="GET"):
        """Serves ``func`` at ``path`` for ``method`` ('GET' or 'POST'); see ``wraps``."""
        method = method.upper()
        if method not in _METHODS:
            raise ValueError(f"WebServing.route: method must be 'GET' or 'POST', got {method!r}")
        self.routes[method, path] = self.wraps(func, arguments, method)

    def start(self):
        """Listens and serves until interrupted (Ctrl-C) or ``stop()``."""
        handler = _handler_class(self.routes)
        self.httpd = http.server.ThreadingHTTPServer((self.host, self.port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.started.set()
        try:
            self.httpd.serve_forever(poll_interval=0.1)      # stop() answers within 0.1 s
        except KeyboardInterrupt:
            pass
        finally:
            self.httpd.server_close()

    def stop(self):
        """Stops a server started (in another thread) by ``start``."""
        if self.httpd is not None:
            self.httpd.shutdown()


def _last_values(pairs):
    """{name: last value} (a repeated field counts by its last value, as in bottle)."""
    return {name: value for name, value in pairs}


def _form_fields(content_type, body):
    """The fields of a POST body: urlencoded or multipart (file parts are skipped)."""
    if content_type.startswith("multipart/form-data"):
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
        fields = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if name is not None and part.get_filename() is None:
                # browsers send UTF-8 parts without a charset (email's default would be ASCII)
                fields[name] = part.get_payload(decode=True).decode(part.get_content_charset() or "utf-8")
        return fields
    return _last_values(urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True))


def _handler_class(routes):
    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, status, text, content_type="application/json; charset=utf-8"):
            body = text.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _serve(self, method):
            url = urllib.parse.urlsplit(self.path)
            handler = routes.get((method, url.path))
            if handler is None:
                allowed = [m for m in _METHODS if (m, url.path) in routes]
                status = 405 if allowed else 404
                return self._answer(status, "Method Not Allowed" if allowed else "Not Found",
                                    "text/plain; charset=utf-8")
            if method == "GET":
                fields = _last_values(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
            else:
                length = int(self.headers.get("Content-Length") or 0)
                fields = _form_fields(self.headers.get("Content-Type", ""), self.rfile.read(length))
            self._answer(200, handler(fields))

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def log_message(self, format, *args):       # quiet, as bottle under paste is by default
            pass

    return Handler
