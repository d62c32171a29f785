# A minimal ACP agent in Python, for the end-to-end tests of interpreter
# commands: it answers initialize, session/new and session/prompt (with
# one chunk of text). "--config PATH" makes it read PATH first, and fail
# if it cannot; "--write PATH" makes each prompt write PATH (and crash if
# it cannot).
import json
import sys

args = sys.argv[1:]
if "--config" in args:
    with open(args[args.index("--config") + 1]) as f:
        f.read()


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {},
              "authMethods": [], "agentInfo": {"name": "python-agent", "version": "1"}}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "py-1"}})
    elif method == "session/prompt":
        if "--write" in args:
            with open(args[args.index("--write") + 1], "w") as f:
                f.write("state\n")
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "py-1", "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hello from python"}}}})
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})
