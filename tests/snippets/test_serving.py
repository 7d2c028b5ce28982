"""gau_keras.snippets.WebServing on the loopback interface (an ephemeral port): bert4keras's
answers, and what a hostile or broken client sends (oversized, slow, malformed, concurrent)."""

import concurrent.futures
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from gau_keras.snippets import WebServing

MAX_BODY = 2000


def _echo(text, n=1):
    if n < 0:
        raise ValueError("n must be >= 0")
    return {"text": text * n, "n": n}


def _results(kind):
    return {
        "numpy": {"scalar": np.float32(0.5), "array": np.arange(3), "count": np.int64(7)},
        "object": {"x": object()},
        "nan": {"x": float("nan")},
    }[kind]


@pytest.fixture
def server():
    web = WebServing(host="127.0.0.1", port=0, max_body=MAX_BODY, channel_timeout=1)
    arguments = {"text": (None, True), "n": (int, False)}
    web.route("/echo", _echo, arguments)
    web.route("/echo_post", _echo, arguments, method="POST")
    web.route("/result", _results, {"kind": (None, True)})
    thread = threading.Thread(target=web.start, daemon=True)
    thread.start()
    assert web.started.wait(10)
    yield f"http://127.0.0.1:{web.port}"
    web.stop()
    thread.join(10)
    assert not thread.is_alive()


def _get(url, data=None, headers=None):
    request = urllib.request.Request(url, data=data, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read().decode("utf-8"))


def test_get_with_typed_arguments(server):
    query = urllib.parse.urlencode({"text": "苹果", "n": "2"})
    assert _get(f"{server}/echo?{query}") == {"code": 0, "desc": "succeeded", "data": {"text": "苹果苹果", "n": 2}}
    assert _get(f"{server}/echo?text=a")["data"] == {"text": "a", "n": 1}  # optional argument left out


def test_errors(server):
    assert _get(f"{server}/echo?n=2") == {"code": 1, "desc": 'lack of "text" argument', "data": {}}
    assert _get(f"{server}/echo?text=a&n=-1") == {"code": 2, "desc": "n must be >= 0", "data": {}}
    answer = _get(f"{server}/echo?text=a&n=two")
    assert answer["code"] == 1 and '"n"' in answer["desc"]
    with pytest.raises(urllib.error.HTTPError) as info:
        _get(f"{server}/missing")
    assert info.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as info:
        _get(f"{server}/echo_post?text=a")  # GET on a POST route
    assert info.value.code == 405


def test_post_urlencoded_and_multipart(server):
    body = urllib.parse.urlencode({"text": "中", "n": "3"}).encode()
    assert _get(f"{server}/echo_post", body)["data"] == {"text": "中中中", "n": 3}
    boundary = "xyzBOUNDARY"
    multipart = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="text"\r\n\r\n文本\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="n"\r\n\r\n2\r\n--{boundary}--\r\n'
    )
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    assert _get(f"{server}/echo_post", multipart.encode("utf-8"), headers)["data"] == {"text": "文本文本", "n": 2}


def test_route_rejects_other_methods():
    with pytest.raises(ValueError, match="method"):
        WebServing().route("/x", _echo, {}, method="PUT")


# ---------------------------------------------------------------- what a client may send


def _port(url):
    return int(url.rsplit(":", 1)[1])


def _raw(url, request, timeout=10, wait=None):
    """Sends ``request`` (bytes) over a socket; (status code, JSON answer or None, seconds until
    the server answered or closed)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", _port(url)), timeout=timeout) as sock:
        sock.sendall(request)
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
            head, _, body = received.partition(b"\r\n\r\n")
            length = [
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
            ]
            if length and len(body) >= length[0]:
                break
    elapsed = time.monotonic() - start
    if not received:
        return None, None, elapsed
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else None, elapsed


def _post(path, body, content_type="application/x-www-form-urlencoded", extra=b""):
    return (
        (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n").encode()
        + extra
        + b"\r\n"
        + body
    )


def test_listens_on_the_loopback_interface_by_default():
    assert WebServing().host == "127.0.0.1"


def test_a_body_over_the_limit_gets_413_without_being_read(server):
    status, answer, _ = _raw(server, _post("/echo_post", b"text=" + b"a" * (MAX_BODY - 5)))
    assert status == 200 and answer["data"]["n"] == 1  # max_body bytes: read
    status, answer, _ = _raw(server, _post("/echo_post", b"text=" + b"a" * (2 * MAX_BODY)))
    assert status == 413 and answer["code"] == 1 and str(MAX_BODY) in answer["desc"], answer
    # announced far over the limit, 6 bytes sent: refused at once, not waited for
    status, answer, elapsed = _raw(
        server, b"POST /echo_post HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\ntext=a"
    )
    assert status == 413 and answer["code"] == 1 and elapsed < 5


@pytest.mark.parametrize("chunked", [False, True])
def test_a_client_sending_64_mb_reads_the_413_instead_of_a_reset(server, chunked):
    """An ordinary client sends its whole body, then reads: the server refuses a 64 MB body
    (from its Content-Length, or once the chunks pass the limit), then reads and throws away
    the rest, so that the client's sending ends without a reset and it reads the answer."""
    block, blocks = b"a" * 2**20, 64
    head = b"POST /echo_post HTTP/1.1\r\nHost: x\r\n" + (
        b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Content-Length: %d\r\n\r\n" % (blocks * len(block))
    )
    framed = b"%x\r\n%s\r\n" % (len(block), block) if chunked else block
    failed = []

    def send():
        try:
            sock.sendall(head)
            for _ in range(blocks):
                sock.sendall(framed)
            sock.sendall(b"0\r\n\r\n" if chunked else b"")
        except OSError as e:  # a reset (the bug), or the timeout
            failed.append(e)

    with socket.create_connection(("127.0.0.1", _port(server)), timeout=10) as sock:
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        sender.join(20)
        assert not sender.is_alive() and not failed, failed
        received = b""
        while b"}" not in received and len(received) < 10000:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), received
    assert json.loads(body)["desc"] == f"the body is over the limit of {MAX_BODY} bytes"


@pytest.mark.parametrize("length", [b"-1", b"abc", b"1e3"])
def test_a_malformed_content_length_gets_400_in_json(server, length):
    status, answer, elapsed = _raw(
        server, b"POST /echo_post HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\ntext=a"
    )
    assert status == 400 and answer["code"] == 1 and "Content-Length" in answer["desc"], answer
    assert elapsed < 5


def test_a_slow_client_times_out_and_others_are_served_meanwhile(server):
    """10 bytes announced, 6 sent, then silence: the connection is closed after the channel
    timeout (1 s here); 150 such clients, beyond the 100 connections served at once, delay a
    normal request until they are closed but do not stop it."""
    idle = []
    for _ in range(150):
        sock = socket.create_connection(("127.0.0.1", _port(server)), timeout=10)
        sock.sendall(b"POST /echo_post HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\ntext=a")
        idle.append(sock)
    try:
        assert _get(f"{server}/echo?text=b")["data"] == {"text": "b", "n": 1}
        start = time.monotonic()
        assert idle[0].recv(1024) == b""  # closed by the server
        assert time.monotonic() - start < 8
    finally:
        for sock in idle:
            sock.close()


def test_fifty_concurrent_clients_are_all_answered(server):
    def ask(i):
        return _get(f"{server}/echo?text={i}&n=2")["data"]["text"]

    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(ask, range(50)))
    assert answers == [f"{i}{i}" for i in range(50)]


def test_numpy_results_are_serialised_and_other_objects_are_code_2(server):
    assert _get(f"{server}/result?kind=numpy")["data"] == {"scalar": 0.5, "array": [0, 1, 2], "count": 7}
    for kind in ("object", "nan"):
        answer = _get(f"{server}/result?kind={kind}")
        assert answer["code"] == 2 and "not JSON-serialisable" in answer["desc"], answer


def test_json_bodies_are_read_and_other_content_types_named(server):
    body = json.dumps({"text": "中", "n": 2}).encode()
    assert _get(f"{server}/echo_post", body, {"Content-Type": "application/json"})["data"] == {"text": "中中", "n": 2}
    status, answer, _ = _raw(server, _post("/echo_post", b"[1, 2]", "application/json"))
    assert status == 400 and "must be an object" in answer["desc"]
    status, answer, _ = _raw(server, _post("/echo_post", b"{", "application/json"))
    assert status == 400 and "does not parse" in answer["desc"]
    status, answer, _ = _raw(server, _post("/echo_post", b"<text>a</text>", "text/xml"))
    assert status == 415 and "text/xml" in answer["desc"]


def test_undecodable_bodies_get_400_in_json(server):
    status, answer, _ = _raw(server, _post("/echo_post", b"text=\xff\xfe"))
    assert status == 400 and "not valid utf-8" in answer["desc"], answer
    boundary = "B0UNDARY"
    part = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="text"\r\n'
        f"Content-Type: text/plain; charset=bogus-8\r\n\r\nabc\r\n--{boundary}--\r\n"
    ).encode()
    status, answer, _ = _raw(server, _post("/echo_post", part, f"multipart/form-data; boundary={boundary}"))
    assert status == 400 and "bogus-8" in answer["desc"], answer
    status, answer, _ = _raw(server, b"GET /echo?text=%FF HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 400 and "UTF-8" in answer["desc"], answer


def test_a_chunked_body_is_read(server):
    body = b"text=ab&n=2"
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    request = (
        b"POST /echo_post HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + chunked
    )
    status, answer, _ = _raw(server, request)
    assert status == 200 and answer["data"] == {"text": "abab", "n": 2}, answer


def test_tracebacks_are_logged_not_sent(server, caplog):
    with caplog.at_level(logging.ERROR, logger="gau_keras.serving"):
        status, answer, _ = _raw(server, b"GET /echo?text=a&n=-1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200 and answer == {"code": 2, "desc": "n must be >= 0", "data": {}}
    assert any("Traceback" in (r.exc_text or "") or r.exc_info for r in caplog.records)


def test_constructor_arguments_are_checked():
    with pytest.raises(ValueError, match="max_body must be a positive integer, got 0"):
        WebServing(max_body=0)
    with pytest.raises(ValueError, match="port must be an integer"):
        WebServing(port="80")
    with pytest.raises(ValueError, match="channel_timeout"):
        WebServing(channel_timeout=-1)
    with pytest.warns(UserWarning, match="server='tornado' names a bottle server"):
        WebServing(server="tornado")


def test_stop_is_once_and_start_leaves_no_socket_open():
    """A second stop() does nothing (it wrote into a reused file descriptor); a stopped server
    closed its listening socket, so a new one starts on the same port; port=0 gives an int."""
    web = WebServing(port=0)
    web.route("/echo", _echo, {"text": (None, True)})
    thread = threading.Thread(target=web.start, daemon=True)
    thread.start()
    assert web.started.wait(10) and isinstance(web.port, int)
    web.stop()
    thread.join(10)
    assert not thread.is_alive()
    web.stop()  # harmless
    again = WebServing(port=web.port)
    again.route("/echo", _echo, {"text": (None, True)})
    thread = threading.Thread(target=again.start, daemon=True)
    thread.start()
    assert again.started.wait(10)
    try:
        assert _get(f"http://127.0.0.1:{again.port}/echo?text=z")["data"] == {"text": "z", "n": 1}
    finally:
        again.stop()
        thread.join(10)
