nuttcp -1 --nofork -P 24332 -p 24333
