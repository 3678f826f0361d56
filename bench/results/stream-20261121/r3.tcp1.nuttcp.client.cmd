nuttcp -T 5 -fparse -P 24356 -p 24357 127.0.0.1
