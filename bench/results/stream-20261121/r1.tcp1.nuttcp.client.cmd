nuttcp -T 5 -fparse -P 24132 -p 24133 127.0.0.1
