// Spark's Thrift server behind `lakesync sql-server` lets in only the SQL endpoint's front door
// (lakesync/lakehouse/hive_proxy.py): the password must equal the key in the file the system
// property lakesync.sql.keyfile names, which the CLI writes fresh (owner-only) at each start.
// Compiled by lakesync/lakehouse/sql_server.py with the JDK's javac when the server starts.
package lakesync;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

public final class FrontDoorAuthenticator implements PasswdAuthenticationProvider {
  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    byte[] key;
    try {
      key = Files.readAllBytes(Paths.get(System.getProperty("lakesync.sql.keyfile", "")));
    } catch (Exception e) {
      throw new AuthenticationException("connect through lakesync sql-server");
    }
    byte[] given = (password == null ? "" : password).getBytes(StandardCharsets.UTF_8);
    if (key.length == 0 || !MessageDigest.isEqual(key, given)) {
      throw new AuthenticationException("connect through lakesync sql-server");
    }
  }
}
