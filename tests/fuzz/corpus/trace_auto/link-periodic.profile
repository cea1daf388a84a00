# SimGrid bandwidth profile: 8 s period
% with a percent comment too
PERIODICITY 8
0 2.8e9
6 3.5e8
