iperf -s -p 24380 -y C
