"""gau_keras.snippets.WebServing on the loopback interface (an ephemeral port)."""
import json
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

from gau_keras.snippets import WebServing


def _echo(text, n=1):
    if n < 0:
        raise ValueError("n must be >= 0")
    return {"text": text * n, "n": n}


@pytest.fixture
def server():
    web = WebServing(host="127.0.0.1", port=0)
    arguments = {"text": (None, True), "n": (int, False)}
    web.route("/echo", _echo, arguments)
    web.route("/echo_post", _echo, arguments, method="POST")
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
    assert _get(f"{server}/echo?text=a")["data"] == {"text": "a", "n": 1}      # optional argument left out


def test_errors(server):
    assert _get(f"{server}/echo?n=2") == {"code": 1, "desc": 'lack of "text" argument', "data": {}}
    assert _get(f"{server}/echo?text=a&n=-1") == {"code": 2, "desc": "n must be >= 0", "data": {}}
    answer = _get(f"{server}/echo?text=a&n=two")
    assert answer["code"] == 1 and '"n"' in answer["desc"]
    with pytest.raises(urllib.error.HTTPError) as info:
        _get(f"{server}/missing")
    assert info.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as info:
        _get(f"{server}/echo_post?text=a")                          # GET on a POST route
    assert info.value.code == 405


def test_post_urlencoded_and_multipart(server):
    body = urllib.parse.urlencode({"text": "中", "n": "3"}).encode()
    assert _get(f"{server}/echo_post", body)["data"] == {"text": "中中中", "n": 3}
    boundary = "xyzBOUNDARY"
    multipart = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"text\"\r\n\r\n文本\r\n"
                 f"--{boundary}\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\n2\r\n--{boundary}--\r\n")
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    assert _get(f"{server}/echo_post", multipart.encode("utf-8"), headers)["data"] == {"text": "文本文本", "n": 2}


def test_route_rejects_other_methods():
    with pytest.raises(ValueError, match="method"):
        WebServing().route("/x", _echo, {}, method="PUT")
