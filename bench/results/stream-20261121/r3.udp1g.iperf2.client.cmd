iperf -c 127.0.0.1 -p 24436 -t 5 -y C -u -b 1g -l 1472
