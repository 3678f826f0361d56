iperf -c 127.0.0.1 -p 24236 -t 5 -y C
