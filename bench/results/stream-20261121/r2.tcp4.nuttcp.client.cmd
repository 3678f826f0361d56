nuttcp -T 5 -fparse -P 24276 -p 24277 -N 4 127.0.0.1
