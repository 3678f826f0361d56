nuttcp -T 5 -fparse -P 24388 -p 24389 -N 4 127.0.0.1
