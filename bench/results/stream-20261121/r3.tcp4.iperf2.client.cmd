iperf -c 127.0.0.1 -p 24380 -t 5 -y C -P 4
