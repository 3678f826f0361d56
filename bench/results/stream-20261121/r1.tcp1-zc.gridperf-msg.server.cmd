/tmp/stream-peers.MigZoO/gridperf serve --port 24180 --once
