/tmp/stream-peers.MigZoO/gridperf serve --port 24364 --once
