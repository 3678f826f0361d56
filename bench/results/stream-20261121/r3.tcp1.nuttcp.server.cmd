nuttcp -1 --nofork -P 24356 -p 24357
