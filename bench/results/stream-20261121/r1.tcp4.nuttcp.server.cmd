nuttcp -1 --nofork -P 24164 -p 24165
