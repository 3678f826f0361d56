nuttcp -T 5 -fparse -P 24164 -p 24165 -N 4 127.0.0.1
