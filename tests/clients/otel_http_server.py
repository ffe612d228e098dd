"""A real HTTP server for tests/tests/e2e/otel_instrumentation.rs: Python's http.server on a
loopback port chosen by the OS, answering GET /status/NNN with status NNN and any other path
with 200. Prints its port, then serves until killed.

Usage: otel_http_server.py
"""
import http.server
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server's naming
        parts = self.path.split("/")
        code = int(parts[2]) if len(parts) == 3 and parts[1] == "status" else 200
        body = f"{code}\n".encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
sys.stdout.close()
server.serve_forever()
