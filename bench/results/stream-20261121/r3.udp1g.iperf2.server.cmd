iperf -s -u -p 24436 -y C
