/tmp/stream-peers.MigZoO/gridperf serve --port 24252 --once
