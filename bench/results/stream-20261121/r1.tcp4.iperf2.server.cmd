iperf -s -p 24156 -y C
