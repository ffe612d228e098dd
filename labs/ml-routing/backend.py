#!/usr/bin/env python3
"""One model-serving backend behind HAProxy: answers GET /predict after SERVICE_MS of work
(a sleep: the request holds a connection as a real inference would), GET /health with 200.

    backend.py PORT NAME SERVICE_MS FAULT_STATUS

On SIGUSR1 it turns faulty: every /predict is answered FAULT_STATUS (404: the model is not
loaded) at once, without the work, which is what makes it the fastest server HAProxy has.
Health checks keep answering 200, as a process that is up but has lost its model does.
"""
import random
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, NAME, SERVICE_MS, FAULT_STATUS = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
faulty = False


def on_usr1(_s, _f):
    global faulty
    faulty = True


signal.signal(signal.SIGUSR1, on_usr1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path.startswith("/health"):
            return self.answer(200, b"ok\n")
        if faulty:
            return self.answer(FAULT_STATUS, b"model not loaded\n")
        # Service time: lognormal around SERVICE_MS (median), as inference times are.
        time.sleep(SERVICE_MS / 1000.0 * random.lognormvariate(0, 0.25))
        return self.answer(200, b'{"score": 0.5}\n')

    def answer(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


Server(("127.0.0.1", PORT), Handler).serve_forever()
