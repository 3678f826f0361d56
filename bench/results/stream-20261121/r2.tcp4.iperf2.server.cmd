iperf -s -p 24268 -y C
