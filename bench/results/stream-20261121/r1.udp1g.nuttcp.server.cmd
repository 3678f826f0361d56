nuttcp -1 --nofork -P 24220 -p 24221
