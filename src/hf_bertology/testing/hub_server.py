"""A small Hugging Face Hub-compatible HTTP server, for testing `push_to_hub` and `from_pretrained` for real.

    with HubServer(root=tmp_path / "hub", token="hf_test") as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_test", "HF_HUB_DISABLE_XET": "1"}
        subprocess.run([...], env=env)       # huggingface_hub reads HF_ENDPOINT when it is imported

Standard library only (`http.server` in a thread), files stored under `root`, bound to 127.0.0.1; it serves the
routes `huggingface_hub` 2.x calls to create a repo, commit files and download them again, and answers errors with
the `X-Error-Code` header the client maps to its exceptions. The routes, and why no package could do it:
docs/hub.md ("A Hub server for tests").
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

MAX_BODY_BYTES = 512 * 1024 * 1024  # a commit carries files inline (base64); refuse anything absurd
SOCKET_TIMEOUT_S = 60  # a stuck client never holds a handler thread forever


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob: what the Hub reports as a regular file's `oid` and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    repo_id: str
    private: bool
    created_at: str
    commits: list[dict] = field(default_factory=list)  # oldest first: {"oid", "title", "files": {path: blob}}

    @property
    def head(self) -> dict:
        return self.commits[-1]

    def commit(self, revision: str) -> dict | None:
        if revision in ("main", "HEAD"):
            return self.head
        return next((c for c in self.commits if c["oid"] == revision), None)


class HubError(Exception):
    def __init__(
        self, status: int, message: str, code: str | None = None, commit: str | None = None, body: dict | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.commit, self.body = status, message, code, commit, body or {}


class HubServer:
    """The server: `start()`/`stop()` or a context manager; `url` is its endpoint (`HF_ENDPOINT`)."""

    def __init__(self, root: str | Path | None = None, token: str = "hf_test_token", user: str = "tester"):
        self._tmp = None if root is not None else tempfile.mkdtemp(prefix="hub-server-")
        self.root = Path(root if root is not None else self._tmp)
        (self.root / "blobs").mkdir(parents=True, exist_ok=True)
        self.token, self.user = token, user
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request, for tests to inspect
        self.lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> HubServer:
        server = self

        class Handler(_Handler):
            hub = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # loopback only, a free port
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=10)
            self._httpd = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- storage ---------------------------------------------------------------------------------------------
    def blob_path(self, blob: str) -> Path:
        return self.root / "blobs" / blob

    def store_blob(self, data: bytes) -> str:
        blob = git_blob_id(data)
        path = self.blob_path(blob)
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        return blob

    def read_file(self, repo_id: str, path: str, revision: str = "main") -> bytes:
        """A committed file's bytes (for tests)."""
        commit = self.repos[repo_id].commit(revision)
        return self.blob_path(commit["files"][path]).read_bytes()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects; every answer carries Content-Length
    timeout = SOCKET_TIMEOUT_S
    server_version = "hf-bertology-test-hub/1"

    def log_message(self, format, *args):  # noqa: A002 - signature of BaseHTTPRequestHandler
        pass  # quiet: tests read `hub.requests` instead

    # -- plumbing --------------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks, total = [], 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                total += size
                if total > MAX_BODY_BYTES:
                    raise HubError(413, "request body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise HubError(413, "request body too large")
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, value, status: int = 200, headers: dict | None = None) -> None:
        self._send(status, json.dumps(value).encode(), headers)

    def _authorised(self) -> bool:
        return self.headers.get("Authorization", "") == f"Bearer {self.hub.token}"

    def _require_token(self) -> None:
        if not self._authorised():
            raise HubError(401, "Invalid credentials in Authorization header")

    def _repo(self, repo_id: str, write: bool = False) -> Repo:
        repo = self.hub.repos.get(repo_id)
        # A private repo looks missing without the token, as on the Hub.
        if repo is None or (repo.private and not self._authorised()):
            raise HubError(404, f"Repository Not Found: {repo_id}", "RepoNotFound")
        if write:
            self._require_token()
        return repo

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        self.hub.requests.append((self.command, path))
        try:
            with self.hub.lock:
                self._route(path, query)
        except HubError as err:
            headers = {"X-Error-Message": err.message}
            if err.code:
                headers["X-Error-Code"] = err.code
            if err.commit:
                headers["X-Repo-Commit"] = err.commit
            self._json({"error": err.message, **err.body}, err.status, headers)
        except (ValueError, KeyError, json.JSONDecodeError) as err:
            self._json({"error": f"bad request: {err}"}, 400, {"X-Error-Message": f"bad request: {err}"})

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _dispatch

    # -- routes ----------------------------------------------------------------------------------------------
    def _route(self, path: str, query: dict) -> None:
        method = self.command
        if path == "/api/whoami-v2" and method == "GET":
            self._require_token()
            return self._json({"type": "user", "name": self.hub.user, "fullname": self.hub.user, "orgs": []})
        if path == "/api/repos/create" and method == "POST":
            return self._create(json.loads(self._body() or b"{}"))
        if path == "/api/validate-yaml" and method == "POST":
            self._body()
            return self._json({"errors": [], "warnings": []})
        match = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/(.*))?", path)
        if match:
            return self._api(match.group(1), match.group(2) or "", query)
        match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if match and method in ("GET", "HEAD"):
            return self._resolve(*match.groups())
        raise HubError(404, f"no route for {method} {path}")

    def _create(self, payload: dict) -> None:
        self._require_token()
        if payload.get("type", "model") != "model":
            raise HubError(400, "this test server only holds model repositories")
        name = payload["name"]
        namespace = payload.get("organization") or self.hub.user
        repo_id = f"{namespace}/{name}"
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
            raise HubError(400, f"invalid repo id {repo_id!r}")
        if repo_id in self.hub.repos:
            # The Hub answers 409 with the repo's url, which `create_repo(exist_ok=True)` returns.
            raise HubError(
                409, f"You already created this model repo: {repo_id}", body={"url": self._repo_url(repo_id)}
            )
        private = payload.get("visibility") == "private" or bool(payload.get("private"))
        repo = Repo(repo_id, private, _now())
        first = {"oid": hashlib.sha1(f"init:{repo_id}".encode()).hexdigest(), "title": "initial commit", "files": {}}
        first["files"][".gitattributes"] = self.hub.store_blob(b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
        repo.commits.append(first)
        self.hub.repos[repo_id] = repo
        self._json({"url": self._repo_url(repo_id), "name": repo_id, "id": repo_id})

    def _repo_url(self, repo_id: str) -> str:
        return f"{self.hub.url}/{repo_id}"

    def _api(self, repo_id: str, rest: str, query: dict) -> None:
        method = self.command
        if rest == "" and method == "GET":
            return self._info(self._repo(repo_id), "main", query)
        match = re.fullmatch(r"revision/(.+)", rest)
        if match and method == "GET":
            return self._info(self._repo(repo_id), match.group(1), query)
        match = re.fullmatch(r"preupload/(.+)", rest)
        if match and method == "POST":
            repo = self._repo(repo_id, write=True)
            files = json.loads(self._body())["files"]
            head = repo.head["files"]
            answer = [
                {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": head.get(f["path"])}
                for f in files
            ]
            return self._json({"files": answer, "commitOid": repo.head["oid"]})
        match = re.fullmatch(r"commit/(.+)", rest)
        if match and method == "POST":
            return self._commit(self._repo(repo_id, write=True), match.group(1))
        match = re.fullmatch(r"tree/([^/]+)(?:/(.*))?", rest)
        if match and method == "GET":
            return self._tree(self._repo(repo_id), match.group(1), match.group(2) or "", query)
        if rest == "refs" and method == "GET":
            repo = self._repo(repo_id)
            branch = {"name": "main", "ref": "refs/heads/main", "targetCommit": repo.head["oid"]}
            return self._json({"branches": [branch], "tags": [], "converts": []})
        raise HubError(404, f"no route for {method} /api/models/{repo_id}/{rest}")

    def _snapshot(self, repo: Repo, revision: str) -> dict:
        commit = repo.commit(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    def _info(self, repo: Repo, revision: str, query: dict) -> None:
        commit = self._snapshot(repo, revision)
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for name, blob in sorted(commit["files"].items()):
            entry = {"rfilename": name}
            if blobs:
                entry.update(size=self.hub.blob_path(blob).stat().st_size, blobId=blob)
            siblings.append(entry)
        author = repo.repo_id.split("/")[0]
        info = {
            "_id": repo.repo_id,
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": author,
            "sha": commit["oid"],
            "lastModified": repo.created_at,
            "createdAt": repo.created_at,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "library_name": "transformers",
            "siblings": siblings,
        }
        self._json(info)

    def _commit(self, repo: Repo, revision: str) -> None:
        if unquote(revision) != "main":
            raise HubError(400, "this test server only commits to main")
        lines = [json.loads(line) for line in self._body().splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "a commit starts with a header line")
        header = lines[0]["value"]
        if header.get("parentCommit") and header["parentCommit"] != repo.head["oid"]:
            raise HubError(412, "parent commit is not the head of main")
        files = dict(repo.head["files"])
        for line in lines[1:]:
            key, value = line["key"], line["value"]
            if key == "file":
                if value.get("encoding", "base64") != "base64":
                    raise HubError(400, f"unsupported encoding {value.get('encoding')!r}")
                files[value["path"]] = self.hub.store_blob(base64.b64decode(value["content"]))
            elif key == "deletedFile":
                if value["path"] not in files:
                    raise HubError(404, f"A file with this name doesn't exist: {value['path']}", "EntryNotFound")
                del files[value["path"]]
            elif key == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                files = {p: b for p, b in files.items() if not p.startswith(prefix)}
            else:  # lfsFile / copies: preupload never answers "lfs", so a client never sends them
                raise HubError(400, f"unsupported commit operation {key!r} (this server takes regular files only)")
        manifest = json.dumps({"parent": repo.head["oid"], "files": files, "title": header["summary"]}, sort_keys=True)
        oid = hashlib.sha1(manifest.encode()).hexdigest()
        repo.commits.append({"oid": oid, "title": header["summary"], "files": files})
        self._json({"commitUrl": f"{self.hub.url}/{repo.repo_id}/commit/{oid}", "commitOid": oid, "success": True})

    def _tree(self, repo: Repo, revision: str, prefix: str, query: dict) -> None:
        commit = self._snapshot(repo, revision)
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = prefix.strip("/")
        base = f"{prefix}/" if prefix else ""
        entries: dict[str, dict] = {}
        for name, blob in sorted(commit["files"].items()):
            if not name.startswith(base):
                continue
            parts = name[len(base) :].split("/")
            for depth in range(1, len(parts)):  # the folders on the way
                folder = base + "/".join(parts[:depth])
                if recursive or depth == 1:
                    entries.setdefault(
                        folder, {"type": "directory", "path": folder, "oid": git_blob_id(folder.encode())}
                    )
            if recursive or len(parts) == 1:
                size = self.hub.blob_path(blob).stat().st_size
                entries[name] = {"type": "file", "path": name, "size": size, "oid": blob}
        if prefix and not entries:
            raise HubError(404, f"{prefix} does not exist on main", "EntryNotFound", commit["oid"])
        self._json(list(entries.values()))

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        repo = self._repo(repo_id)
        commit = self._snapshot(repo, unquote(revision))
        blob = commit["files"].get(path)
        if blob is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", commit["oid"])
        data = self.hub.blob_path(blob).read_bytes()
        headers = {"ETag": f'"{blob}"', "X-Repo-Commit": commit["oid"], "Accept-Ranges": "bytes"}
        status, start = 200, 0
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if match and self.command == "GET":  # resumed downloads ask for the rest of a file
            start = int(match.group(1))
            end = int(match.group(2)) + 1 if match.group(2) else len(data)
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
            data, status = data[start:end], 206
        headers["Content-Length"] = str(len(data))
        self._send(status, data, headers, content_type="application/octet-stream")
